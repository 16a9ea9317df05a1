// SPDX-License-Identifier: BSD-3-Clause
/*
 * libpbox's CUDA module (pbox-3/cuda.so): push-pulls of GPU memory, staged
 * through pinned host memory (BytePS §6.2: registered buffers, reused).
 *
 * A tensor goes in pieces of [tuning] partition_size. One stager thread per
 * context moves each piece through four states, in a pool of pinned slots
 * allocated once (the first CUDA push-pull) and reused:
 *
 *   SLOT   waits for a free slot
 *   IN     its copy to the host is queued on the stream "in" (after the
 *          caller's stream reached the call: an event, no host wait)
 *   NET    the copy landed: pbox_push_pull() of the slot, in place
 *   BACK   the sum came: its copy to the GPU is queued on the stream "out"
 *
 * and the slot is free again once that copy has landed. The two streams
 * are the GPU's two copy engines: piece i + 1 goes to the host while piece
 * i is on the network and earlier results come back. Push-pulls start in
 * piece order, jobs in call order, so every rank starts the same pieces in
 * the same order (libpbox agrees each new piece with every rank, as any new
 * tensor). The caller's stream is never synchronised with the device: the
 * call records an event on it and the "in" stream waits for that event.
 *
 * The thread polls (a piece's copy takes microseconds, its network
 * milliseconds) and sleeps on a condition variable when no job is open.
 *
 * A tensor compressed on the GPU (pbox_set_compression(px, key,
 * "sign@gpu"), struct wk_cuda_comp) is compressed in IN, each piece with
 * its error feedback in device memory (comp_cuda_encode(), into the slot's
 * twin in device memory), and only the compressed bytes cross to the host;
 * NET pushes them as they are (host->push_pull_as(), pre); BACK copies the
 * compressed sums back and decompresses them into the output. A tensor
 * moved off the GPU sends its residual with its next push (IN adds it).
 *
 * PBOX_CUDA_STAGE_ONLY=1 (perf/gpu) skips the network: each piece's "sum"
 * is its own copy, so that a push-pull measures the staging alone against
 * the copy engines' peak.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comp_cuda.h"
#include "stage.h"

namespace {

enum piece_state { P_SLOT, P_IN, P_NET, P_BACK, P_DONE };

#define STAGE_ALIASES 4096

struct piece {
	uint64_t key, off, count, bytes;
	uint64_t wbytes; /* what crosses to the host: bytes, or compressed on the GPU */
	int slot;
	enum piece_state st;
	cudaEvent_t ev; /* the copy in, then the copy back */
	struct pbox_handle *h;
};

struct job {
	const char *in;
	char *out;
	enum pbox_dtype dtype;
	bool has_comp;		  /* fp32, its comp set by pbox_set_compression() */
	struct wk_cuda_comp comp; /* comp.gpu: compressed here (zeros without has_comp) */
	uint32_t n, next_slot, next_net, done; /* pieces: all, slotted, pushed, back */
	struct piece *pc;
	cudaEvent_t start; /* on the caller's stream at the call */
	int status;	   /* PBOX_OK, or the first failure */
	char msg[512];
	bool finished; /* under mu: every piece DONE (or failed and drained) */
	struct job *next;
};

struct stager {
	struct wk_cuda_host host;
	int device;
	cudaStream_t s_in, s_out;
	cudaStream_t s_loc; /* local aggregation on the GPU: its copies and sums */
	char *pool;
	char *dwire; /* the slots' twins in device memory (compressed on the GPU) */
	/* each piece's error feedback in device memory, sorted by key: the
	 * stager thread's alone */
	struct resid *resid;
	uint32_t n_resid, cap_resid;
	uint32_t n_slots, n_free;
	int *free_slots;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a job came, or one finished */
	struct job *head, *tail;
	bool stop;
	bool stage_only; /* PBOX_CUDA_STAGE_ONLY: no network */
	/* dev_open() of a rank in this process: its pointer, nothing opened */
	void *alias[STAGE_ALIASES];
	uint32_t n_alias;
};

struct resid {
	uint64_t key, count;
	float *d;
	bool held; /* it holds what a compressed push left out */
};

size_t dtype_size(enum pbox_dtype d)
{
	return d == PBOX_FP32 ? 4 : 2;
}

void job_fail(struct job *j, int status, const char *what, cudaError_t e)
{
	if (j->status != PBOX_OK)
		return;
	j->status = status;
	if (e != cudaSuccess)
		snprintf(j->msg, sizeof(j->msg), "pbox_push_pull_cuda: %s: %s", what,
			 cudaGetErrorString(e));
	else
		snprintf(j->msg, sizeof(j->msg), "%s", what);
}

/* Piece @p's slot in the pinned pool. */
char *slot_of(const struct stager *sg, const struct piece *p)
{
	return sg->pool + (size_t)p->slot * sg->host.piece_bytes;
}

/* A piece that ends here, whether summed and back or dropped after a
 * failure: its slot free again, the piece counted. */
void piece_end(struct stager *sg, struct job *j, struct piece *p)
{
	p->st = P_DONE;
	sg->free_slots[sg->n_free++] = p->slot;
	j->done++;
}

/* The buffers of one sum, passed by value (a kernel parameter). */
struct sum_args {
	const void *src[WK_CUDA_SUM_MAX];
	void *dst;
	uint32_t n;
	uint64_t count;
};

__device__ float to_f(float v)
{
	return v;
}
__device__ float to_f(__half v)
{
	return __half2float(v);
}
__device__ float to_f(__nv_bfloat16 v)
{
	return __bfloat162float(v);
}
__device__ void from_f(float *d, float v)
{
	*d = v;
}
__device__ void from_f(__half *d, float v)
{
	*d = __float2half_rn(v);
}
__device__ void from_f(__nv_bfloat16 *d, float v)
{
	*d = __float2bfloat16_rn(v);
}

/* dst = src[0] + src[1] + ... in that order, in fp32: what the CPU path
 * (the AVX kernels' load, add, store) computes, bit for bit. */
template <typename T> __global__ void sum_kernel(struct sum_args a)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

	for (uint64_t k = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; k < a.count;
	     k += stride) {
		float acc = to_f(static_cast<const T *>(a.src[0])[k]);

		for (uint32_t j = 1; j < a.n; j++)
			acc += to_f(static_cast<const T *>(a.src[j])[k]);
		from_f(static_cast<T *>(a.dst) + k, acc);
	}
}

/* The blocks of 256 threads for @count elements (a grid-stride loop past
 * 4096 of them). */
unsigned sum_grid(uint64_t count)
{
	uint64_t blocks = (count + 255) / 256;

	return blocks > 4096 ? 4096u : (unsigned)blocks;
}

/* The error feedback of piece @key (@count elements) in device memory,
 * zero at first; NULL: out of memory. */
struct resid *resid_of(struct stager *sg, uint64_t key, uint64_t count, bool make)
{
	uint32_t at = 0;
	struct resid *r;

	while (at < sg->n_resid && sg->resid[at].key < key)
		at++;
	if (at < sg->n_resid && sg->resid[at].key == key)
		return sg->resid[at].count == count ? &sg->resid[at] : NULL;
	if (!make)
		return NULL;
	if (sg->n_resid == sg->cap_resid) {
		uint32_t cap = sg->cap_resid ? sg->cap_resid * 2 : 64;
		struct resid *v = static_cast<struct resid *>(
			realloc(sg->resid, cap * sizeof(*v)));

		if (!v)
			return NULL;
		sg->resid = v;
		sg->cap_resid = cap;
	}
	r = &sg->resid[at];
	memmove(r + 1, r, (sg->n_resid - at) * sizeof(*r));
	*r = (struct resid){key, count, NULL, false};
	/* zeros on "in", before the first encode there (a plain cudaMemset()
	 * would run on the legacy stream, which "in" does not wait for) */
	if (cudaMalloc(reinterpret_cast<void **>(&r->d), count * 4) != cudaSuccess ||
	    cudaMemsetAsync(r->d, 0, count * 4, sg->s_in) != cudaSuccess) {
		if (r->d)
			cudaFree(r->d);
		memmove(r, r + 1, (sg->n_resid - at) * sizeof(*r));
		return NULL;
	}
	sg->n_resid++;
	return r;
}

/* Slot @p's twin in device memory (allocated at the first compressed job). */
char *dwire_of(struct stager *sg, const struct piece *p)
{
	if (!sg->dwire && cudaMalloc(reinterpret_cast<void **>(&sg->dwire),
				     (size_t)sg->n_slots * sg->host.piece_bytes) != cudaSuccess) {
		sg->dwire = NULL;
		return NULL;
	}
	return sg->dwire + (size_t)p->slot * sg->host.piece_bytes;
}

struct comp_spec spec_of(const struct job *j)
{
	return (struct comp_spec){j->comp.scheme, j->comp.ppm};
}

/* IN for a piece compressed on the GPU: input plus its residual
 * compressed into the slot's twin, then those bytes to the host. */
cudaError_t in_compressed(struct stager *sg, struct job *j, struct piece *p)
{
	const struct comp_spec c = spec_of(j);
	struct resid *r = resid_of(sg, p->key, p->count, true);
	char *w = dwire_of(sg, p);

	if (!r || !w)
		return cudaErrorMemoryAllocation;
	if (comp_cuda_encode(&c, reinterpret_cast<const float *>(j->in + p->off), r->d, p->count,
			     j->comp.frag_elems, w, NULL, sg->s_in))
		return cudaErrorLaunchFailure;
	r->held = true;
	p->wbytes = comp_cuda_bytes(&c, p->count, j->comp.frag_elems);
	return cudaMemcpyAsync(slot_of(sg, p), w, p->wbytes, cudaMemcpyDeviceToHost, sg->s_in);
}

/* IN for a piece whose residual the GPU holds but which is no longer
 * compressed there: input plus residual (sum_kernel, in fp32 as the CPU
 * would add them) to the host, the residual zero again. */
cudaError_t in_flushed(struct stager *sg, struct job *j, struct piece *p, struct resid *r)
{
	struct sum_args a = {};
	char *w = dwire_of(sg, p);
	cudaError_t e;

	if (!w)
		return cudaErrorMemoryAllocation;
	a.src[0] = j->in + p->off;
	a.src[1] = r->d;
	a.dst = w;
	a.n = 2;
	a.count = p->count;
	sum_kernel<float><<<sum_grid(p->count), 256, 0, sg->s_in>>>(a);
	e = cudaGetLastError();
	if (e == cudaSuccess)
		e = cudaMemsetAsync(r->d, 0, p->count * 4, sg->s_in);
	r->held = false;
	return e == cudaSuccess ? cudaMemcpyAsync(slot_of(sg, p), w, p->bytes,
						  cudaMemcpyDeviceToHost, sg->s_in)
				: e;
}

/* A piece to its slot on the host (IN), its event after the copy. */
void piece_in(struct stager *sg, struct job *j, struct piece *p)
{
	struct resid *r = j->dtype == PBOX_FP32 && sg->n_resid
				  ? resid_of(sg, p->key, p->count, false)
				  : NULL;
	cudaError_t e;

	p->wbytes = p->bytes;
	if (j->comp.gpu)
		e = in_compressed(sg, j, p);
	else if (r && r->held)
		e = in_flushed(sg, j, p, r);
	else
		e = cudaMemcpyAsync(slot_of(sg, p), j->in + p->off, p->bytes,
				    cudaMemcpyDeviceToHost, sg->s_in);
	if (e == cudaSuccess)
		e = cudaEventRecord(p->ev, sg->s_in);
	if (e != cudaSuccess)
		job_fail(j, PBOX_ENET, "the copy to the host", e);
}

/* A piece's sum back to the output (BACK): copied, or copied compressed
 * and decompressed there. */
cudaError_t piece_back(struct stager *sg, struct job *j, struct piece *p)
{
	const struct comp_spec c = spec_of(j);
	char *w;
	cudaError_t e;

	if (!j->comp.gpu)
		return cudaMemcpyAsync(j->out + p->off, slot_of(sg, p), p->bytes,
				       cudaMemcpyHostToDevice, sg->s_out);
	w = dwire_of(sg, p);
	e = cudaMemcpyAsync(w, slot_of(sg, p), p->wbytes, cudaMemcpyHostToDevice, sg->s_out);
	if (e == cudaSuccess)
		e = cudaMemsetAsync(j->out + p->off, 0, p->bytes, sg->s_out);
	if (e == cudaSuccess && comp_cuda_add(&c, reinterpret_cast<float *>(j->out + p->off), w,
					      p->count, j->comp.frag_elems, NULL, sg->s_out))
		e = cudaErrorLaunchFailure;
	return e;
}

/* One pass over the open jobs; whether anything moved. Jobs are taken in
 * call order for the slots and the push-pulls (the order every rank keeps). */
#define STEP_JOBS 64

bool step(struct stager *sg)
{
	bool moved = false, slot_blocked = false, net_blocked = false;
	struct job *open[STEP_JOBS], *j;
	unsigned n_open = 0;

	/* Only this thread finishes a job, and a waiter frees only finished
	 * ones: the open jobs stay valid outside the lock. */
	pthread_mutex_lock(&sg->mu);
	for (j = sg->head; j && n_open < STEP_JOBS; j = j->next)
		if (!j->finished)
			open[n_open++] = j;
	pthread_mutex_unlock(&sg->mu);
	for (unsigned k = 0; k < n_open; k++) {
		j = open[k];
		/* the copies in, while slots last (in order: a later job waits) */
		while (!slot_blocked && j->next_slot < j->n && sg->n_free) {
			struct piece *p = &j->pc[j->next_slot++];

			p->slot = sg->free_slots[--sg->n_free];
			piece_in(sg, j, p);
			p->st = P_IN;
			moved = true;
		}
		if (j->next_slot < j->n)
			slot_blocked = true;
		/* the push-pulls, in piece order and call order (as on every
		 * rank), once each copy has landed */
		while (!net_blocked && j->next_net < j->next_slot) {
			struct piece *p = &j->pc[j->next_net];
			char *slot = slot_of(sg, p);
			/* landed even when the job failed: the slot is reused after */
			cudaError_t e = cudaEventQuery(p->ev);
			int rc;

			if (e == cudaErrorNotReady)
				break;
			j->next_net++;
			moved = true;
			if (e != cudaSuccess)
				job_fail(j, PBOX_ENET, "the copy to the host", e);
			if (j->status != PBOX_OK) { /* drained: no push for it */
				piece_end(sg, j, p);
				continue;
			}
			p->h = NULL;
			rc = sg->stage_only ? PBOX_OK
			     : j->has_comp
				     ? sg->host.push_pull_as(sg->host.px, p->key, slot, slot,
							     p->count, j->comp.scheme, j->comp.gpu,
							     &p->h)
				     : sg->host.push_pull(sg->host.px, p->key, slot, slot,
							  p->count, j->dtype, &p->h);
			if (rc != PBOX_OK) {
				job_fail(j, rc, sg->host.last_error(), cudaSuccess);
				piece_end(sg, j, p);
				continue;
			}
			p->st = P_NET;
		}
		if (j->next_net < j->n)
			net_blocked = true;
		/* the sums back, each as it comes; slots free once copied */
		for (uint32_t i = 0; i < j->next_net; i++) {
			struct piece *p = &j->pc[i];
			cudaError_t e;
			int rc;

			if (p->st == P_NET) {
				rc = p->h ? sg->host.test(p->h) : PBOX_OK;
				if (rc == PBOX_EAGAIN)
					continue;
				p->h = NULL;
				moved = true;
				if (rc != PBOX_OK) {
					job_fail(j, rc, sg->host.last_error(), cudaSuccess);
					piece_end(sg, j, p);
					continue;
				}
				e = piece_back(sg, j, p);
				if (e == cudaSuccess)
					e = cudaEventRecord(p->ev, sg->s_out);
				if (e != cudaSuccess) {
					job_fail(j, PBOX_ENET, "the copy back to the GPU", e);
					cudaStreamSynchronize(sg->s_out); /* the slot is free after */
					piece_end(sg, j, p);
					continue;
				}
				p->st = P_BACK;
			}
			if (p->st == P_BACK) {
				e = cudaEventQuery(p->ev);
				if (e == cudaErrorNotReady)
					continue;
				if (e != cudaSuccess)
					job_fail(j, PBOX_ENET, "the copy back to the GPU", e);
				piece_end(sg, j, p);
				moved = true;
			}
		}
		if (j->done == j->n) {
			pthread_mutex_lock(&sg->mu);
			j->finished = true;
			pthread_cond_broadcast(&sg->cv);
			pthread_mutex_unlock(&sg->mu);
		}
	}
	return moved;
}

/* Under mu. */
bool open_jobs(const struct stager *sg)
{
	for (struct job *j = sg->head; j; j = j->next)
		if (!j->finished)
			return true;
	return false;
}

void *stager_main(void *arg)
{
	struct stager *sg = static_cast<struct stager *>(arg);
	const struct timespec nap = {0, 20000};

	cudaSetDevice(sg->device);
	sg->host.mark_stage();
	for (;;) {
		pthread_mutex_lock(&sg->mu);
		while (!sg->stop && !open_jobs(sg))
			pthread_cond_wait(&sg->cv, &sg->mu);
		if (sg->stop) {
			pthread_mutex_unlock(&sg->mu);
			return NULL;
		}
		pthread_mutex_unlock(&sg->mu);
		if (!step(sg))
			nanosleep(&nap, NULL);
	}
}

void job_free(struct job *j)
{
	for (uint32_t i = 0; i < j->n; i++)
		cudaEventDestroy(j->pc[i].ev);
	cudaEventDestroy(j->start);
	free(j->pc);
	free(j);
}

/* Under mu: unlink a finished job. */
void job_unlink(struct stager *sg, struct job *j)
{
	struct job **pp = &sg->head, *prev = NULL;

	while (*pp && *pp != j) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = j->next;
	if (sg->tail == j)
		sg->tail = prev;
}

int answer(struct stager *sg, struct job *j)
{
	int st = j->status;

	job_unlink(sg, j);
	pthread_mutex_unlock(&sg->mu);
	if (st != PBOX_OK)
		sg->host.err(st, "%s", j->msg);
	job_free(j);
	return st;
}

/* pbox_push_pull_cuda()'s checks of its memory, whichever path takes it,
 * and the other _cuda calls' (@fn). */
int st_check(void *stager, const char *fn, uint64_t key, const void *in, void *out,
	     uint64_t count, enum pbox_dtype dtype)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	size_t es = dtype_size(dtype);
	uint64_t bytes = count * es, per = sg->host.piece_bytes / es;
	struct cudaPointerAttributes a[2];
	cudaError_t e;

	for (int k = 0; k < 2; k++) {
		e = cudaPointerGetAttributes(&a[k], k ? out : in);
		if (e != cudaSuccess || a[k].type != cudaMemoryTypeDevice)
			return sg->host.err(PBOX_EINVAL,
					    "%s: key %" PRIu64 ": @%s is not device memory%s%s", fn,
					    key, k ? "out" : "in", e != cudaSuccess ? ": " : "",
					    e != cudaSuccess ? cudaGetErrorString(e) : "");
		if (a[k].device != sg->device)
			return sg->host.err(PBOX_EINVAL,
					    "%s: key %" PRIu64
					    ": @%s is on GPU %d, this context stages for GPU %d",
					    fn, key, k ? "out" : "in", a[k].device, sg->device);
	}
	if (in != out && (const char *)in < (char *)out + bytes &&
	    (char *)out < (const char *)in + bytes)
		return sg->host.err(PBOX_EINVAL,
				    "%s: key %" PRIu64 ": @in and @out overlap without being equal",
				    fn, key);
	if ((count + per - 1) / per > 0xfffffu)
		return sg->host.err(PBOX_EINVAL, "%s: key %" PRIu64 ": more than 2^20 pieces", fn,
				    key);
	return PBOX_OK;
}

int st_push_pull(void *stager, uint64_t key, const void *in, void *out, uint64_t count,
		 enum pbox_dtype dtype, void *stream, const struct wk_cuda_comp *comp,
		 void **jobp)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	size_t es = dtype_size(dtype);
	uint64_t per = sg->host.piece_bytes / es;
	struct job *j;
	cudaError_t e;
	int rc = st_check(stager, "pbox_push_pull_cuda", key, in, out, count, dtype);

	if (rc)
		return rc;
	j = static_cast<struct job *>(calloc(1, sizeof(*j)));
	if (!j)
		return sg->host.err(PBOX_ENOMEM, "pbox_push_pull_cuda: out of memory");
	j->in = static_cast<const char *>(in);
	j->out = static_cast<char *>(out);
	j->dtype = dtype;
	if (comp && dtype == PBOX_FP32) { /* only fp32 compresses */
		j->has_comp = true;
		j->comp = *comp;
		j->comp.gpu = comp->gpu && comp->scheme != COMP_NONE && comp->scheme != COMP_RANDK &&
			      comp->frag_elems;
	}
	j->n = (uint32_t)((count + per - 1) / per);
	j->pc = static_cast<struct piece *>(calloc(j->n, sizeof(*j->pc)));
	e = j->pc ? cudaEventCreateWithFlags(&j->start, cudaEventDisableTiming) : cudaErrorMemoryAllocation;
	for (uint32_t i = 0; e == cudaSuccess && i < j->n; i++) {
		struct piece *p = &j->pc[i];

		p->key = wk_cuda_piece_key(key, i);
		p->off = (uint64_t)i * per * es;
		p->count = i + 1 < j->n ? per : count - (uint64_t)i * per;
		p->bytes = p->count * es;
		p->slot = -1;
		e = cudaEventCreateWithFlags(&p->ev, cudaEventDisableTiming);
	}
	/* the caller's work so far, then ours: an event, no host wait */
	if (e == cudaSuccess)
		e = cudaEventRecord(j->start, static_cast<cudaStream_t>(stream));
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(sg->s_in, j->start, 0);
	if (e != cudaSuccess) {
		if (j->pc)
			job_free(j);
		else
			free(j);
		return sg->host.err(PBOX_ENOMEM, "pbox_push_pull_cuda: key %" PRIu64 ": %s", key,
				    cudaGetErrorString(e));
	}
	pthread_mutex_lock(&sg->mu);
	if (sg->tail)
		sg->tail->next = j;
	else
		sg->head = j;
	sg->tail = j;
	pthread_cond_broadcast(&sg->cv);
	pthread_mutex_unlock(&sg->mu);
	*jobp = j;
	return PBOX_OK;
}

int st_test(void *stager, void *job)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	struct job *j = static_cast<struct job *>(job);

	pthread_mutex_lock(&sg->mu);
	if (!j->finished) {
		pthread_mutex_unlock(&sg->mu);
		return PBOX_EAGAIN;
	}
	return answer(sg, j);
}

int st_wait(void *stager, void *job)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	struct job *j = static_cast<struct job *>(job);

	pthread_mutex_lock(&sg->mu);
	while (!j->finished)
		pthread_cond_wait(&sg->cv, &sg->mu);
	return answer(sg, j);
}

/* What the open set up, as far as it got (pool, streams, slots), and the
 * stager itself. */
void stager_free(struct stager *sg)
{
	for (uint32_t i = 0; i < sg->n_resid; i++)
		cudaFree(sg->resid[i].d);
	free(sg->resid);
	if (sg->dwire)
		cudaFree(sg->dwire);
	if (sg->pool)
		cudaFreeHost(sg->pool);
	if (sg->s_loc)
		cudaStreamDestroy(sg->s_loc);
	if (sg->s_out)
		cudaStreamDestroy(sg->s_out);
	if (sg->s_in)
		cudaStreamDestroy(sg->s_in);
	free(sg->free_slots);
	free(sg);
}

void st_close(void *stager)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	struct job *j, *next;

	pthread_mutex_lock(&sg->mu);
	sg->stop = true;
	pthread_cond_broadcast(&sg->cv);
	pthread_mutex_unlock(&sg->mu);
	pthread_join(sg->thr, NULL);
	cudaSetDevice(sg->device);
	cudaStreamSynchronize(sg->s_in);
	cudaStreamSynchronize(sg->s_out);
	cudaStreamSynchronize(sg->s_loc);
	for (j = sg->head; j; j = next) { /* never waited for: the caller's loss */
		next = j->next;
		job_free(j);
	}
	pthread_cond_destroy(&sg->cv);
	pthread_mutex_destroy(&sg->mu);
	stager_free(sg);
}

/* ---- local aggregation on the GPU (local.c) ------------------------------ */

int loc_fail(struct stager *sg, const char *what, cudaError_t e)
{
	return sg->host.err(e == cudaErrorMemoryAllocation ? PBOX_ENOMEM : PBOX_ENODEV,
			    "GPU %d: %s: %s", sg->device, what,
			    cudaGetErrorString(e));
}

/* A new event in *@ev after the work queued on @stream so far. */
int record_on(struct stager *sg, cudaStream_t stream, void **ev, const char *what)
{
	cudaEvent_t x;
	cudaError_t e = cudaEventCreateWithFlags(&x, cudaEventDisableTiming);

	if (e == cudaSuccess) {
		e = cudaEventRecord(x, stream);
		if (e != cudaSuccess)
			cudaEventDestroy(x);
	}
	if (e != cudaSuccess)
		return loc_fail(sg, what, e);
	*ev = x;
	return PBOX_OK;
}

/* After the work just queued on s_loc: a new event in *@ev (when asked). */
int loc_record(struct stager *sg, void **ev, const char *what)
{
	return ev ? record_on(sg, sg->s_loc, ev, what) : PBOX_OK;
}

int loc_after(struct stager *sg, void *after, const char *what)
{
	cudaError_t e = after ? cudaStreamWaitEvent(sg->s_loc, static_cast<cudaEvent_t>(after), 0)
			      : cudaSuccess;

	return e == cudaSuccess ? PBOX_OK : loc_fail(sg, what, e);
}

int st_mark(void *stager, void *stream, void **ev)
{
	struct stager *sg = static_cast<struct stager *>(stager);

	cudaSetDevice(sg->device);
	return record_on(sg, static_cast<cudaStream_t>(stream), ev,
			 "an event on the caller's stream");
}

int st_dev_alloc(void *stager, uint64_t bytes, void **dptr, struct wk_cuda_ipc *h)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	cudaIpcMemHandle_t mh;
	cudaError_t e;

	static_assert(sizeof(mh) == WK_CUDA_IPC_LEN, "cudaIpcMemHandle_t's size");
	cudaSetDevice(sg->device);
	e = cudaMalloc(dptr, bytes);
	if (e != cudaSuccess)
		return loc_fail(sg, "cudaMalloc", e);
	e = cudaIpcGetMemHandle(&mh, *dptr);
	if (e != cudaSuccess) {
		cudaFree(*dptr);
		*dptr = NULL;
		return loc_fail(sg, "cudaIpcGetMemHandle", e);
	}
	memcpy(h->b, &mh, sizeof(mh));
	h->ptr = (uint64_t)(uintptr_t)*dptr;
	h->pid = (uint32_t)getpid();
	return PBOX_OK;
}

/* Another GPU's memory in this process: peer access from ours, as
 * cudaIpcMemLazyEnablePeerAccess gives an opened handle. */
int alias_reach(struct stager *sg, const void *p)
{
	struct cudaPointerAttributes at;
	cudaError_t e;
	int can = 0;

	cudaSetDevice(sg->device);
	e = cudaPointerGetAttributes(&at, p);
	if (e != cudaSuccess)
		return loc_fail(sg, "a local rank's buffer", e);
	if (at.device == sg->device)
		return PBOX_OK;
	e = cudaDeviceCanAccessPeer(&can, sg->device, at.device);
	if (e == cudaSuccess && !can)
		return sg->host.err(PBOX_ENODEV,
				    "local aggregation: GPU %d cannot reach GPU %d's memory; set "
				    "[worker] local_cuda = host",
				    sg->device, at.device);
	if (e == cudaSuccess)
		e = cudaDeviceEnablePeerAccess(at.device, 0);
	if (e == cudaErrorPeerAccessAlreadyEnabled) {
		cudaGetLastError(); /* not an error here: clear it */
		e = cudaSuccess;
	}
	return e == cudaSuccess ? PBOX_OK : loc_fail(sg, "cudaDeviceEnablePeerAccess", e);
}

int st_dev_open(void *stager, const struct wk_cuda_ipc *h, void **dptr)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	cudaIpcMemHandle_t mh;
	cudaError_t e;

	if (h->pid == (uint32_t)getpid()) { /* one address space: the pointer itself */
		pthread_mutex_lock(&sg->mu);
		if (sg->n_alias == STAGE_ALIASES) {
			pthread_mutex_unlock(&sg->mu);
			return sg->host.err(PBOX_ENOMEM,
					    "local aggregation on GPU %d: over %d buffers of ranks "
					    "in this process",
					    sg->device, STAGE_ALIASES);
		}
		*dptr = reinterpret_cast<void *>(static_cast<uintptr_t>(h->ptr));
		sg->alias[sg->n_alias++] = *dptr;
		pthread_mutex_unlock(&sg->mu);
		return alias_reach(sg, *dptr);
	}
	memcpy(&mh, h->b, sizeof(mh));
	cudaSetDevice(sg->device);
	/* another GPU's memory too, where the two can reach each other */
	e = cudaIpcOpenMemHandle(dptr, mh, cudaIpcMemLazyEnablePeerAccess);
	return e == cudaSuccess ? PBOX_OK
				: loc_fail(sg,
					   "cudaIpcOpenMemHandle (a local rank's GPU memory; "
					   "[worker] local_cuda = host sums through host memory)",
					   e);
}

void st_dev_free(void *stager, void *dptr, int opened)
{
	struct stager *sg = static_cast<struct stager *>(stager);

	if (opened) { /* a pointer of this process's own: nothing was opened */
		pthread_mutex_lock(&sg->mu);
		for (uint32_t i = 0; i < sg->n_alias; i++)
			if (sg->alias[i] == dptr) {
				sg->alias[i] = sg->alias[--sg->n_alias];
				pthread_mutex_unlock(&sg->mu);
				return;
			}
		pthread_mutex_unlock(&sg->mu);
	}
	cudaSetDevice(sg->device);
	if (opened)
		cudaIpcCloseMemHandle(dptr);
	else
		cudaFree(dptr);
}

int st_host_pin(void *stager, void *p, uint64_t bytes)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	cudaError_t e;

	cudaSetDevice(sg->device);
	e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
	return e == cudaSuccess ? PBOX_OK : loc_fail(sg, "cudaHostRegister", e);
}

void st_host_unpin(void *stager, void *p)
{
	struct stager *sg = static_cast<struct stager *>(stager);

	cudaSetDevice(sg->device);
	cudaHostUnregister(p);
}

int st_copy(void *stager, void *dst, const void *src, uint64_t bytes, void *after, void **ev)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	cudaError_t e;
	int rc;

	cudaSetDevice(sg->device);
	rc = loc_after(sg, after, "waiting for the caller's stream");
	if (rc)
		return rc;
	e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, sg->s_loc);
	if (e != cudaSuccess)
		return loc_fail(sg, "cudaMemcpyAsync", e);
	return loc_record(sg, ev, "an event after a copy");
}

int st_sum(void *stager, void *dst, const void *const *src, uint32_t n, uint64_t count,
	   enum pbox_dtype dtype, void *after, void **ev)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	struct sum_args a = {};
	unsigned threads = 256, blocks;
	cudaError_t e;
	int rc;

	if (n == 0 || n > WK_CUDA_SUM_MAX)
		return sg->host.err(PBOX_EINVAL,
				    "local aggregation on GPU %d: %u buffers to sum, at most %d",
				    sg->device, n, WK_CUDA_SUM_MAX);
	cudaSetDevice(sg->device);
	rc = loc_after(sg, after, "waiting for the caller's stream");
	if (rc)
		return rc;
	memcpy(a.src, src, n * sizeof(*src));
	a.dst = dst;
	a.n = n;
	a.count = count;
	blocks = (unsigned)((count + threads - 1) / threads);
	if (blocks > 4096) /* a grid-stride loop past that */
		blocks = 4096;
	if (dtype == PBOX_FP32)
		sum_kernel<float><<<blocks, threads, 0, sg->s_loc>>>(a);
	else if (dtype == PBOX_FP16)
		sum_kernel<__half><<<blocks, threads, 0, sg->s_loc>>>(a);
	else
		sum_kernel<__nv_bfloat16><<<blocks, threads, 0, sg->s_loc>>>(a);
	e = cudaGetLastError();
	if (e != cudaSuccess)
		return loc_fail(sg, "the sum kernel", e);
	return loc_record(sg, ev, "an event after a sum");
}

int st_done(void *stager, void *ev)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	cudaEvent_t x = static_cast<cudaEvent_t>(ev);
	cudaError_t e;

	cudaSetDevice(sg->device);
	e = cudaEventQuery(x);
	if (e == cudaErrorNotReady)
		return 0;
	cudaEventDestroy(x);
	return e == cudaSuccess ? 1 : loc_fail(sg, "a copy or sum on the GPU", e);
}

void st_drop(void *stager, void *ev)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	cudaEvent_t x = static_cast<cudaEvent_t>(ev);

	cudaSetDevice(sg->device);
	cudaEventSynchronize(x);
	cudaEventDestroy(x);
}

/* The compressor's cost on this GPU: 1 MiB of fp32 in the layout's
 * fragments, each way, the least of 20 runs timed by events. */
int st_profile(void *stager, const struct wk_cuda_comp *comp, double *enc_b, double *dec_b)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	const struct comp_spec c = {comp->scheme, comp->ppm};
	const size_t n = 1u << 18;
	float *g = NULL, *r = NULL, *o = NULL, best[2] = {1e30f, 1e30f};
	void *w = NULL;
	cudaEvent_t ev[3] = {};
	cudaError_t e;

	int caller = -1;

	if (c.scheme == COMP_NONE || c.scheme == COMP_RANDK || !comp->frag_elems)
		return sg->host.err(PBOX_EINVAL,
				    "pbox_decide_compression: scheme %u does not compress on the GPU",
				    c.scheme);
	cudaGetDevice(&caller); /* the caller's thread: its device as it was, after */
	cudaSetDevice(sg->device);
	e = cudaMalloc(reinterpret_cast<void **>(&g), 3 * n * 4);
	if (e == cudaSuccess)
		e = cudaMalloc(&w, n * 4);
	for (int k = 0; e == cudaSuccess && k < 3; k++)
		e = cudaEventCreate(&ev[k]);
	if (e == cudaSuccess) {
		r = g + n;
		o = g + 2 * n;
		e = cudaMemsetAsync(g, 0x3c, 3 * n * 4, sg->s_loc); /* 0.0115 each */
	}
	for (int i = 0; e == cudaSuccess && i < 20; i++) {
		float t[2];

		cudaEventRecord(ev[0], sg->s_loc);
		comp_cuda_encode(&c, g, r, n, comp->frag_elems, w, NULL, sg->s_loc);
		cudaEventRecord(ev[1], sg->s_loc);
		cudaMemsetAsync(o, 0, n * 4, sg->s_loc);
		comp_cuda_add(&c, o, w, n, comp->frag_elems, NULL, sg->s_loc);
		cudaEventRecord(ev[2], sg->s_loc);
		e = cudaEventSynchronize(ev[2]);
		if (e == cudaSuccess)
			e = cudaEventElapsedTime(&t[0], ev[0], ev[1]);
		if (e == cudaSuccess)
			e = cudaEventElapsedTime(&t[1], ev[1], ev[2]);
		for (int k = 0; e == cudaSuccess && k < 2; k++)
			best[k] = t[k] < best[k] ? t[k] : best[k];
	}
	for (int k = 0; k < 3; k++)
		if (ev[k])
			cudaEventDestroy(ev[k]);
	cudaFree(w);
	cudaFree(g);
	if (caller >= 0)
		cudaSetDevice(caller);
	if (e != cudaSuccess)
		return loc_fail(sg, "profiling the compressor", e);
	*enc_b = best[0] * 1e-3 / (4.0 * n);
	*dec_b = best[1] * 1e-3 / (4.0 * n);
	return PBOX_OK;
}

const struct wk_cuda_ops ops = {st_push_pull, st_test,	    st_wait,	 st_close,
				st_check,     st_mark,	    st_dev_alloc, st_dev_open,
				st_dev_free,  st_host_pin,  st_host_unpin, st_copy,
				st_sum,	      st_done,	    st_drop,	  st_profile};

} // namespace

extern "C" int pbox_module_cuda_open(const struct wk_cuda_host *host, void **out,
				     const struct wk_cuda_ops **opsp)
{
	const char *stage_only = getenv("PBOX_CUDA_STAGE_ONLY");
	struct stager *sg;
	cudaError_t e;
	int n = 0;

	if (host->abi != WK_CUDA_ABI || host->size != sizeof(*host))
		return host->err(PBOX_ENODEV,
				 "pbox_push_pull_cuda: the CUDA module was built with another "
				 "libpbox (interface %u, libpbox's %u): install both from one build",
				 WK_CUDA_ABI, host->abi);
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0)
		return host->err(PBOX_ENODEV, "pbox_push_pull_cuda: no GPU: %s",
				 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
	sg = static_cast<struct stager *>(calloc(1, sizeof(*sg)));
	if (!sg)
		return host->err(PBOX_ENOMEM, "pbox_push_pull_cuda: out of memory");
	sg->host = *host;
	sg->stage_only = stage_only && !strcmp(stage_only, "1");
	sg->n_slots = (uint32_t)(host->pool_bytes / host->piece_bytes);
	if (sg->n_slots < 2)
		sg->n_slots = 2;
	e = cudaGetDevice(&sg->device);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&sg->s_in, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&sg->s_out, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&sg->s_loc, cudaStreamNonBlocking);
	if (e == cudaSuccess) /* once per context, reused by every push-pull */
		e = cudaHostAlloc(reinterpret_cast<void **>(&sg->pool),
				  (size_t)sg->n_slots * host->piece_bytes, cudaHostAllocPortable);
	sg->free_slots = static_cast<int *>(calloc(sg->n_slots, sizeof(int)));
	if (e != cudaSuccess || !sg->free_slots) {
		int rc = host->err(e != cudaSuccess ? PBOX_ENODEV : PBOX_ENOMEM,
				   "pbox_push_pull_cuda: setting up GPU %d: %s", sg->device,
				   e != cudaSuccess ? cudaGetErrorString(e) : "out of memory");

		stager_free(sg);
		return rc;
	}
	for (uint32_t i = 0; i < sg->n_slots; i++)
		sg->free_slots[sg->n_free++] = (int)(sg->n_slots - 1 - i);
	pthread_mutex_init(&sg->mu, NULL);
	pthread_cond_init(&sg->cv, NULL);
	n = pthread_create(&sg->thr, NULL, stager_main, sg);
	if (n != 0) { /* pthread_create() says why in its result, not errno */
		pthread_cond_destroy(&sg->cv);
		pthread_mutex_destroy(&sg->mu);
		stager_free(sg);
		return host->err(PBOX_ENOMEM, "pbox_push_pull_cuda: no stager thread: %s",
				 strerror(n));
	}
	*out = sg;
	*opsp = &ops;
	return PBOX_OK;
}
