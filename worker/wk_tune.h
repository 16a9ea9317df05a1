/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_TUNE_H
#define PBOX_WK_TUNE_H

#include "wk_ctx.h"

/* ---- tune.c: [tuning] autotune (engine thread) ------------------------------ */

/* Each turn of the loop; each push-pull completed. */
void wk_tune_turn(struct pbox *px, uint64_t now);
void wk_tune_done(struct pbox *px, uint64_t bytes, uint64_t now);
/* A window is over: goodput @g (bytes per ns) at the values in force; the
 * search's next step. */
void wk_tune_window(struct pbox *px, double g);
/* Put a tuned value in force (@phase: which). */
void wk_tune_apply(struct pbox *px, unsigned phase, uint64_t v);

#endif /* PBOX_WK_TUNE_H */
