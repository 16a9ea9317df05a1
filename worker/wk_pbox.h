/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_PBOX_H
#define PBOX_WK_PBOX_H

#include "wk_ctx.h"

/* ---- pbox.c: the API ----------------------------------------------------------- */

/* A push-pull of any key by the path the context takes (local aggregation
 * or the network job). */
int wk_submit(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
	      enum pbox_dtype dtype, struct pbox_handle **op);

#endif /* PBOX_WK_PBOX_H */
