/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_ASYNC_H
#define PBOX_WK_ASYNC_H

#include "wk_ctx.h"

/* ---- async.c: asynchronous training (pbox.h's pbox_push_pull_async());
 * nothing of its own for libpbox ------------------------------------------ */

#endif /* PBOX_WK_ASYNC_H */
