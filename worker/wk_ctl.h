/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_CTL_H
#define PBOX_WK_CTL_H

#include "wk_ctx.h"

/* ---- ctl.c: the control connections (the engine thread's) ---- */

/* The control side of one engine turn: the ranks' lines, the boxes'
 * connections, REJOIN, heartbeats, telling a failure, the BYE barrier
 * (@finalizing). The ranks' lines it read: a line can start work (GREW
 * lays tensors out, and their push-pulls go). */
int wk_ctl_turn(struct pbox *px, uint64_t now, bool finalizing);

#endif /* PBOX_WK_CTL_H */
