/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_HANDLE_H
#define PBOX_WK_HANDLE_H

#include "wk_ctx.h"

/* ---- handle.c: push-pull handles completed ---------------------------------- */

/* Complete @op with @status (under mu). */
void wk_op_complete_locked(struct pbox *px, struct pbox_handle *op, int status, const char *msg);
/* Fail every op in flight or queued (under mu). */
void wk_fail_all_locked(struct pbox *px, int status, const char *msg);
/* Fail every push-pull the engine holds or was given (engine thread, or
 * no engine; takes mu), and drop its schedule. */
void wk_fail_ops(struct pbox *px);
/* The engine's schedule dropped, every pointer it held into push-pulls
 * (the heap, the turns, rank 0's order, the active lists): they failed. */
void wk_drop_schedule(struct pbox *px);

#endif /* PBOX_WK_HANDLE_H */
