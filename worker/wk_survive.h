/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_SURVIVE_H
#define PBOX_WK_SURVIVE_H

#include "wk_ctx.h"

/* ---- survive.c: pbox_shrink() and pbox_rejoin() -------------------------------- */

/* Rank 0: how tensor @key of @bytes resumes, from the accounts of ranks
 * 0..n-1 (@pl->own filled); 0, or -1 with @why (the step is redone). */
int wk_resume_plan(uint64_t key, uint64_t bytes, const struct wk_rs_rank *rk, uint32_t n,
		   struct wk_rs_plan *pl, char *why, size_t cap);
/* Rank 0: whether the survivors' accounts (ranks 0..n-1) let the job
 * resume; 0, or -1 with @why naming the rank that cannot (a sharded
 * collective in flight, pieces counted differently, CUDA, memory). */
int wk_rs_resumable(const struct wk_rs_rank *rk, uint32_t n, char *why, size_t cap);
const struct wk_rs_ent *wk_rs_find(const struct wk_rs_rank *rk, uint64_t key);

#endif /* PBOX_WK_SURVIVE_H */
