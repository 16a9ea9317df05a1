/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_GROW_H
#define PBOX_WK_GROW_H

#include "wk_ctx.h"

/* ---- grow.c: tensors first used after the start ----------------------------- */

/* Lay out @n tensors (any dtypes: one segment per dtype, in dtype order),
 * and on rank 0 put them on the boxes: at once, and they are ready, or
 * with @later as requests for the box client's thread, and they are not
 * yet. PBOX_OK or a failure code. */
int wk_grow(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, struct wk_box_batch *later,
	    uint64_t deadline, char *msg, size_t cap);
/* Engine side: announce new tensors, agree on them (rank 0), lay out what
 * was agreed; a control line that is grow.c's (1) or not (0). */
void wk_grow_poll(struct pbox *px);
int wk_grow_line(struct pbox *px, uint32_t from, const struct rp_msg *m);
/* The engine's nap of @wait ns, cut to when rank 0 agrees on the new
 * tensors announced so far (no NEW for a quiet moment). */
uint64_t wk_grow_wait(const struct pbox *px, uint64_t now, uint64_t wait);

#endif /* PBOX_WK_GROW_H */
