/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_PBOX_H
#define PBOX_WK_PBOX_H

#include "wk_ctx.h"

/* ---- pbox.c: the API ----------------------------------------------------------- */

/* A push-pull of any key by the path the context takes (local aggregation
 * or the network job). */
int wk_submit(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
	      enum pbox_dtype dtype, struct pbox_handle **op);

/* PBOX_OK, or PBOX_EINVAL where @key is libpbox's own (from 2^63), said
 * as @fn's. */
int wk_own_key(const char *fn, uint64_t key);

#endif /* PBOX_WK_PBOX_H */
