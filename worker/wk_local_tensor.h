/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_LOCAL_TENSOR_H
#define PBOX_WK_LOCAL_TENSOR_H

#include "wk_ctx.h"
#include "local.h"

/* ---- local_tensor.c: the machine's tensors, their memory and ops ---- */

/* pbox_set_compression() with local aggregation */
int wk_local_set_compression(struct pbox *px, const char *fn, uint64_t key, int comp, int rcomp,
			     bool gather);
/* The network key of piece @i of local tensor @key (from 2^63 up). */
uint64_t wk_lc_piece_key(uint64_t key, uint32_t i);
/* The machine's table (under mu): @key's tensor or NULL; a new one
 * (NULL: out of memory); one freed. */
struct wk_ltensor *wk_lc_lt_find(const struct wk_local *lc, uint64_t key);
struct wk_ltensor *wk_lc_lt_add(struct wk_local *lc, uint64_t key, uint64_t count, uint8_t dtype,
				int prio);
void wk_lc_lt_free(struct wk_ltensor *t, uint32_t local_size);
/* Leader: declare @t's pieces to the network job (under mu). */
int wk_lc_lt_net(struct pbox *px, struct wk_ltensor *t, const char *fn);
/* Map @t's memory (the leader creates it: @memfd < 0); 0 or -1 with errno. */
int wk_lc_lt_map(const struct wk_local *lc, struct wk_ltensor *t, int memfd);
/* The CUDA module's operations. */
const struct wk_cuda_ops *wk_lc_cu(const struct pbox *px);
/* @t's device side on this rank: its buffer and IPC handle, the table of
 * opened buffers, the pieces' events; the leader's region 0 (mapped
 * already) page-locked for the copies to and from the network. PBOX_OK, or
 * a PBOX_E* with the error set. */
int wk_lc_lt_gpu(struct pbox *px, struct wk_ltensor *t);
/* @t's device side given back (the local thread, at its end). */
void wk_lc_lt_gpu_free(const struct pbox *px, struct wk_ltensor *t);
/* Leader: piece @i of @op summed on the GPU (its own input first, then
 * every local rank's buffer) into its buffer, then copied to region 0 for
 * the network; t->ev[i] answers for both. */
int wk_lc_gpu_sum(struct pbox *px, struct pbox_handle *op, uint32_t i, uint64_t first, uint64_t n);
/* Leader: the network's sum of piece @i back to its buffer (whence the
 * others take it) and to its output; t->ev[i] answers for both. */
int wk_lc_gpu_back(struct pbox *px, struct pbox_handle *op, uint32_t i, uint64_t first, uint64_t n);
/* What a rank sums a key in, for the messages: "CUDA" or "host" memory. */
const char *wk_lc_mem_kind(bool dev);
/* Fail this rank (the others: what the leader or the socket said). */
void wk_lc_raise(struct pbox *px, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Complete @op (the local thread; takes mu). */
void wk_lc_op_done(struct pbox *px, struct pbox_handle *op, int status, const char *msg);
/* The push-pulls the API queued since the last look (the thread's now). */
struct pbox_handle *wk_lc_take_queue(struct pbox *px);
/* @t's work still in flight once its op failed: the GPU's copies and sums
 * waited for (the caller's memory is not touched after its op ends); the
 * leader's pieces on the network end with the job's failure, or with
 * finalize (the engine still runs). */
void wk_lc_release(const struct pbox *px, struct wk_ltensor *t);
/* Every op fails with @code and @msg; the leader tells its ranks, once,
 * and a rank whose own failure it is tells the leader. */
void wk_lc_fail_ops(struct pbox *px, int code, const char *msg);
/* The same, the queued ops being @q (taken from the queue by the caller,
 * under mu with what it read of the failure): an op queued after the
 * failure was reset (pbox_shrink() returned, and its caller went on) is
 * the next incarnation's, never failed with the last one's failure. */
void wk_lc_fail_taken(struct pbox *px, struct pbox_handle *q, int code, const char *msg);
/* wk_lc_lt_find(), taking mu. */
struct wk_ltensor *wk_lc_lt_get(struct pbox *px, uint64_t key);

#endif /* PBOX_WK_LOCAL_TENSOR_H */
