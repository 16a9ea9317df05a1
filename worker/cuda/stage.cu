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
 * PBOX_CUDA_STAGE_ONLY=1 (perf/gpu) skips the network: each piece's "sum"
 * is its own copy, so that a push-pull measures the staging alone against
 * the copy engines' peak.
 */
#include <cuda_runtime.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stage.h"

namespace {

enum piece_state { P_SLOT, P_IN, P_NET, P_BACK, P_DONE };

struct piece {
	uint64_t key, off, count, bytes;
	int slot;
	enum piece_state st;
	cudaEvent_t ev; /* the copy in, then the copy back */
	struct pbox_handle *h;
};

struct job {
	const char *in;
	char *out;
	enum pbox_dtype dtype;
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
	char *pool;
	uint32_t n_slots, n_free;
	int *free_slots;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a job came, or one finished */
	struct job *head, *tail;
	bool stop;
	bool stage_only; /* PBOX_CUDA_STAGE_ONLY: no network */
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
			cudaError_t e;

			p->slot = sg->free_slots[--sg->n_free];
			e = cudaMemcpyAsync(slot_of(sg, p), j->in + p->off, p->bytes,
					    cudaMemcpyDeviceToHost, sg->s_in);
			if (e == cudaSuccess)
				e = cudaEventRecord(p->ev, sg->s_in);
			if (e != cudaSuccess)
				job_fail(j, PBOX_ENET, "the copy to the host", e);
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
				e = cudaMemcpyAsync(j->out + p->off, slot_of(sg, p), p->bytes,
						    cudaMemcpyHostToDevice, sg->s_out);
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

int st_push_pull(void *stager, uint64_t key, const void *in, void *out, uint64_t count,
		 enum pbox_dtype dtype, void *stream, void **jobp)
{
	struct stager *sg = static_cast<struct stager *>(stager);
	size_t es = dtype_size(dtype);
	uint64_t bytes = count * es, per = sg->host.piece_bytes / es;
	struct cudaPointerAttributes a[2];
	struct job *j;
	cudaError_t e;

	for (int k = 0; k < 2; k++) {
		e = cudaPointerGetAttributes(&a[k], k ? out : in);
		if (e != cudaSuccess || a[k].type != cudaMemoryTypeDevice)
			return sg->host.err(PBOX_EINVAL,
					    "pbox_push_pull_cuda: key %" PRIu64
					    ": @%s is not device memory%s%s",
					    key, k ? "out" : "in", e != cudaSuccess ? ": " : "",
					    e != cudaSuccess ? cudaGetErrorString(e) : "");
		if (a[k].device != sg->device)
			return sg->host.err(PBOX_EINVAL,
					    "pbox_push_pull_cuda: key %" PRIu64
					    ": @%s is on GPU %d, this context stages for GPU %d",
					    key, k ? "out" : "in", a[k].device, sg->device);
	}
	if (in != out && (const char *)in < (char *)out + bytes &&
	    (char *)out < (const char *)in + bytes)
		return sg->host.err(PBOX_EINVAL,
				    "pbox_push_pull_cuda: key %" PRIu64
				    ": @in and @out overlap without being equal",
				    key);
	if ((count + per - 1) / per > 0xfffffu)
		return sg->host.err(PBOX_EINVAL,
				    "pbox_push_pull_cuda: key %" PRIu64 ": more than 2^20 pieces", key);
	j = static_cast<struct job *>(calloc(1, sizeof(*j)));
	if (!j)
		return sg->host.err(PBOX_ENOMEM, "pbox_push_pull_cuda: out of memory");
	j->in = static_cast<const char *>(in);
	j->out = static_cast<char *>(out);
	j->dtype = dtype;
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
	if (sg->pool)
		cudaFreeHost(sg->pool);
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
	for (j = sg->head; j; j = next) { /* never waited for: the caller's loss */
		next = j->next;
		job_free(j);
	}
	pthread_cond_destroy(&sg->cv);
	pthread_mutex_destroy(&sg->mu);
	stager_free(sg);
}

const struct wk_cuda_ops ops = {st_push_pull, st_test, st_wait, st_close};

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
