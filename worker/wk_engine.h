/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_ENGINE_H
#define PBOX_WK_ENGINE_H

#include "wk_ctx.h"

/* ---- engine.c: the progress thread ------------------------------------------ */

int wk_engine_start(struct pbox *px);
void wk_engine_join(struct pbox *px);

#endif /* PBOX_WK_ENGINE_H */
