/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_PBOX_H
#define PBOX_WK_PBOX_H

#include "wk_ctx.h"

/* ---- pbox.c: the API ----------------------------------------------------------- */

/* A push-pull of any key by the path the context takes (local aggregation
 * or the network job). */
int wk_submit(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
	      enum pbox_dtype dtype, struct pbox_handle **op);

/* libpbox's own bookkeeping (ByteComp's decision, the step to redo): an
 * exact fp32 sum of @x[@n] on every rank under its own @key (from 2^63 up),
 * in place, the call waited for: declared on first use and never
 * compressed (uncompressed, every sum of integers below 2^24 is exact).
 * The codes of pbox_push_pull() and pbox_wait(). */
int wk_own_sum(struct pbox *px, uint64_t key, float *x, uint32_t n);

/* PBOX_OK, or PBOX_EINVAL where @key is libpbox's own (from 2^63), said
 * as @fn's. */
int wk_own_key(const char *fn, uint64_t key);

#endif /* PBOX_WK_PBOX_H */
