/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_FAIL_H
#define PBOX_WK_FAIL_H

#include "wk_ctx.h"

/* ---- fail.c: the failure machine -------------------------------------------- */

/* The job fails: kind @kind, its code @code where the kind has none, @who
 * the rank or box it names gone (or, HEARD, the rank that saw it first),
 * the message. The first failure holds; the push-pulls fail with it (the
 * engine's by the engine). Any thread. */
void wk_raise(struct pbox *px, enum wk_fkind kind, int code, uint32_t who, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* A new incarnation: RUNNING again, nothing gone (under mu or alone). */
void wk_fail_reset(struct pbox *px);
/* The engine told the other ranks: TOLD. */
void wk_fail_told(struct pbox *px);

#endif /* PBOX_WK_FAIL_H */
