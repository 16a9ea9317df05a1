/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Between libpbox and its CUDA module (pbox-3/cuda.so, worker/cuda/stage.cu):
 * plain C, so that the module, compiled by nvcc as C++, needs nothing of
 * libpbox's insides. libpbox loads the module on the first
 * pbox_push_pull_cuda() and opens one stager per context with what the
 * stager may call back (libpbox exports pbox_* only).
 */
#ifndef PBOX_CUDA_STAGE_H
#define PBOX_CUDA_STAGE_H

#include <stdint.h>

#include "pbox.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WK_CUDA_ABI   4u /* bump on any change below */
#define WK_CUDA_ENTRY "pbox_module_cuda_open"

struct wk_cuda_host {
	uint32_t abi;	      /* WK_CUDA_ABI */
	uint32_t size;	      /* sizeof(struct wk_cuda_host) */
	struct pbox *px;      /* the context, for push_pull */
	uint64_t piece_bytes; /* [tuning] partition_size: a piece's size */
	uint64_t pool_bytes;  /* the pinned pool: several pieces in flight */
	/* sets the calling thread's pbox_last_error(); returns @code */
	int (*err)(int code, const char *fmt, ...)
#ifdef __GNUC__
		__attribute__((format(printf, 2, 3)))
#endif
		;
	/* pbox_push_pull() that also takes libpbox's own keys (2^63 up) */
	int (*push_pull)(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			 enum pbox_dtype dtype, struct pbox_handle **op);
	/* push_pull() of a piece of an fp32 tensor whose compression the
	 * caller set (struct wk_cuda_comp): compressed with @scheme (enum
	 * comp_scheme) from this push-pull on; @pre: @in already holds its
	 * fragments compressed (comp_cuda_encode()'s layout, the error
	 * feedback the module's), and @out takes the compressed sums in the
	 * same layout, for the module to decompress */
	int (*push_pull_as)(struct pbox *px, uint64_t key, const void *in, void *out,
			    uint64_t count, int scheme, int pre, struct pbox_handle **op);
	int (*test)(struct pbox_handle *op); /* pbox_test() */
	const char *(*last_error)(void);     /* pbox_last_error() */
	/* called by the stager's thread as it starts: its push-pulls of
	 * tensors every rank knows take no place in the rank's order of
	 * collectives (wk_on_stage()), which is then the program's whatever
	 * the host pushes meanwhile */
	void (*mark_stage)(void);
};

/* A device allocation as another rank of the machine opens it: its CUDA IPC
 * handle (cudaIpcMemHandle_t's bytes), and for a rank in the same process
 * (CUDA opens no handle its own process exported) the pointer itself. */
#define WK_CUDA_IPC_LEN 64
struct wk_cuda_ipc {
	uint8_t b[WK_CUDA_IPC_LEN];
	uint64_t ptr;
	uint32_t pid;
	uint32_t pad;
};

/*
 * A CUDA tensor's compression, as pbox_set_compression() set it: its
 * pieces take @scheme (enum comp_scheme; rate @ppm), compressed on the GPU
 * before the copy to the host where @gpu (comp_cuda_encode() in fragments
 * of @frag_elems, each piece's error feedback kept in device memory; the
 * sums copied back compressed and decompressed there), else on the CPU by
 * libpbox, from the staged fp32 bytes. NULL: the job's [job] compression,
 * on the CPU.
 */
struct wk_cuda_comp {
	uint8_t scheme;
	uint8_t gpu;
	uint16_t pad;
	uint32_t ppm;
	uint64_t frag_elems;
};

/*
 * push_pull(): a checked pbox_push_pull_cuda(), compressed as @comp says;
 * *job is the module's record of it. test() answers PBOX_EAGAIN or the job's status, wait()
 * blocks for it; either frees the job once it has answered with a status
 * (the error message set). close() ends the stager's thread and frees its
 * pinned pool and streams; libpbox calls it at finalize, after its engine
 * stopped (no result lands in the pool any more).
 */
struct wk_cuda_ops {
	int (*push_pull)(void *stager, uint64_t key, const void *in, void *out, uint64_t count,
			 enum pbox_dtype dtype, void *stream, const struct wk_cuda_comp *comp,
			 void **job);
	int (*test)(void *stager, void *job);
	int (*wait)(void *stager, void *job);
	void (*close)(void *stager);
	/*
	 * Local aggregation on the GPU (local.c, [worker] local_cuda = ipc):
	 * device memory shared by the ranks of one machine through CUDA IPC,
	 * copied and summed on the stager's device, in order on one stream of
	 * its own, every step answered by an event that the caller polls.
	 *
	 * check(): pbox_push_pull_cuda()'s checks of @in and @out, as
	 * push_pull() makes them, its messages naming @fn (the caller's
	 * call; cstage.c's also check one buffer at a time, @in = @out).
	 * mark(): an event on the caller's @stream, where the call was made
	 * (no host wait). dev_alloc(): @bytes of device memory and its IPC
	 * handle; dev_open(): another process's allocation
	 * by its handle; dev_free(): either (@opened: the latter).
	 * host_pin()/host_unpin(): page-lock host memory for asynchronous copies
	 * (a failure is not fatal: copies of pageable memory still land).
	 * copy() and sum() queue their work after @after (a mark, or NULL) and,
	 * with @ev, record an event after it; sum() writes to @dst the sum of
	 * @n buffers of @count elements, accumulated in fp32 in the order given
	 * (the CPU path's order: the same bits). done(): 1 when @ev's work has
	 * landed (the event freed), 0 while it has not, a PBOX_E* when it failed
	 * (freed, the error set). drop(): wait for @ev's work, then free it.
	 * Each sets the calling thread's device itself.
	 */
	int (*check)(void *stager, const char *fn, uint64_t key, const void *in, void *out,
		     uint64_t count, enum pbox_dtype dtype);
	int (*mark)(void *stager, void *stream, void **ev);
	int (*dev_alloc)(void *stager, uint64_t bytes, void **dptr, struct wk_cuda_ipc *h);
	int (*dev_open)(void *stager, const struct wk_cuda_ipc *h, void **dptr);
	void (*dev_free)(void *stager, void *dptr, int opened);
	int (*host_pin)(void *stager, void *p, uint64_t bytes);
	void (*host_unpin)(void *stager, void *p);
	int (*copy)(void *stager, void *dst, const void *src, uint64_t bytes, void *after,
		    void **ev);
	int (*sum)(void *stager, void *dst, const void *const *src, uint32_t n, uint64_t count,
		   enum pbox_dtype dtype, void *after, void **ev);
	int (*done)(void *stager, void *ev);
	void (*drop)(void *stager, void *ev);
	/* The GPU's cost of @comp's compressor (pbox_decide_compression()):
	 * seconds per fp32 byte encoding and decoding, the least of several
	 * runs over 1 MiB, as autocomp.c profiles the CPU's. */
	int (*profile)(void *stager, const struct wk_cuda_comp *comp, double *enc_b, double *dec_b);
};

/* The most buffers one sum() takes: a machine's ranks. */
#define WK_CUDA_SUM_MAX 64

/* The module's one entry: a stager for @host->px, or a PBOX_E* with the
 * error set (PBOX_ENODEV: no GPU, no driver). */
typedef int wk_cuda_open_fn(const struct wk_cuda_host *host, void **stager,
			    const struct wk_cuda_ops **ops);

/* The key of piece @i of the CUDA tensor @key: libpbox's own key space. */
static inline uint64_t wk_cuda_piece_key(uint64_t key, uint32_t i)
{
	uint64_t z = key + 0x9e3779b97f4a7c15ull; /* splitmix64: the user's key spread */

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return 1ull << 63 | (z << 20 & ~(1ull << 63)) | (i & 0xfffffu);
}

#ifdef __cplusplus
}
#endif

#endif /* PBOX_CUDA_STAGE_H */
