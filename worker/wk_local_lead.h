/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_LOCAL_LEAD_H
#define PBOX_WK_LOCAL_LEAD_H

#include "wk_ctx.h"
#include "local.h"

/* ---- local_lead.c: the local thread: the leader's pieces, the others' side ---- */

/* The local thread (@arg: the context), started by wk_local_ready(). */
void *wk_lc_thread(void *arg);

#endif /* PBOX_WK_LOCAL_LEAD_H */
