/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_CSTAGE_H
#define PBOX_WK_CSTAGE_H

#include "wk_ctx.h"

/* ---- cstage.c: GPU memory for the whole-buffer calls (pbox.h's
 * pbox_reduce_scatter_cuda(), pbox_all_gather_cuda(), pbox_broadcast_cuda(),
 * pbox_push_pull_async_cuda()); pbox_finalize() stops its thread through
 * px->cst_stop ------------------------------------------------------------ */

#endif /* PBOX_WK_CSTAGE_H */
