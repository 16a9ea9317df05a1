/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_BOOT_H
#define PBOX_WK_BOOT_H

#include "wk_ctx.h"

/* ---- boot.c: the bootstrap, and its mirror ---------------------------------- */

int wk_boot(struct pbox *px);
/* Free one incarnation's connections, layout and engine state. */
void wk_free_net(struct pbox *px);

#endif /* PBOX_WK_BOOT_H */
