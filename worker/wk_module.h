/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_MODULE_H
#define PBOX_WK_MODULE_H

#include "wk_ctx.h"

/*
 * ---- module.c: what a job may need and most hosts lack, loaded only when
 * asked for, so that libpbox itself links no DPDK and no CUDA library. A
 * module lives in the directory "pbox-<major>" beside libpbox (or
 * $PBOX_MODULE_DIR); it sees no libpbox structure, only a versioned table
 * (transport.h's struct wk_tp_env, cuda/stage.h's host table).
 */
/* The environment a transport module gets for context @px. */
void wk_tp_env_init(struct pbox *px, struct wk_tp_env *env);
/* The entry @sym of module @name ("dpdk", "cuda"), loaded on first use;
 * NULL with the error set for API function @fn (what is missing, and where
 * it was looked for). */
void *wk_module_sym(const char *fn, const char *name, const char *sym);

#endif /* PBOX_WK_MODULE_H */
