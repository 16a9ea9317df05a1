/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_SUBMIT_H
#define PBOX_WK_SUBMIT_H

#include "cuda/stage.h"
#include "wk_ctx.h"

/* ---- submit.c: the network job's side of the API ---------------------------- */

/* The pinned host memory a context's CUDA push-pulls stage through. */
#define WK_CUDA_POOL (64ull << 20)
/* @count elements of @dtype, for API function @fn: PBOX_OK or PBOX_EINVAL. */
int wk_check_tensor(const char *fn, uint64_t key, uint64_t count, enum pbox_dtype dtype);
/* The tensor of @key, or NULL (under mu once started). */
struct wk_tensor *wk_find_tensor(const struct pbox *px, uint64_t key);
/* A tensor into the index (under mu once started). */
int wk_add_tensor(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
		  enum pbox_dtype dtype, int priority, struct wk_tensor **out);
/* The network job's push-pull of any key (libpbox's own too). */
int wk_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		 enum pbox_dtype dtype, struct pbox_handle **op);
/* A push-pull of tensor @key as collective @kind (enum wk_kind) of root
 * @root: the kind and root agreed at its first use, as its count and
 * dtype; @in or @out NULL where the kind gives this rank none; @group: the
 * sharded collective it is a piece of (0: none), whose pieces are sent
 * interleaved. */
int wk_collective(struct pbox *px, const char *fn, uint64_t key, const void *in, void *out,
		  uint64_t count, enum pbox_dtype dtype, uint8_t kind, uint32_t root,
		  uint64_t group, struct pbox_handle **op);
/* The CUDA module's push-pull of a piece of an fp32 tensor, compressed
 * with @scheme (-1: its tensor's), @pre: @in and @out in the compressed
 * fragments' layout (struct wk_cuda_host's push_pull_as()). */
int wk_push_pull_as(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		    int scheme, int pre, struct pbox_handle **op);
/* A new tensor made a piece of collective @kind of root @root in @group
 * (what wk_collective() does at first use; local aggregation's leader at
 * a shard's first call), under mu. */
void wk_tensor_rooted(struct wk_tensor *t, uint8_t kind, uint32_t root, uint64_t group);
/* The CUDA module loaded (px->cuda_ops), or a PBOX_E* saying why not. */
int wk_cuda_load(struct pbox *px, const char *fn);
/* The staged CUDA tensor of @key (under mu), or NULL. */
struct wk_ckey *wk_ckey_find(const struct pbox *px, uint64_t key);
/* pbox_push_pull_cuda() of @key on the staged path: the key noted (its
 * first call), and 1 with its compression in @c where
 * pbox_set_compression() set one; 0: the job's; or PBOX_ENOMEM. */
int wk_ckey_note(struct pbox *px, uint64_t key, enum pbox_dtype dtype, struct wk_cuda_comp *c);
/* The network job's layout into @o (its world, not the machines'). */
void wk_net_layout(const struct pbox *px, struct pbox_layout_info *o);

#endif /* PBOX_WK_SUBMIT_H */
