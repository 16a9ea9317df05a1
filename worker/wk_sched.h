/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_SCHED_H
#define PBOX_WK_SCHED_H

#include "wk_ctx.h"

/* ---- sched.c: the scheduler (engine thread) --------------------------------- */

/* What orders tensor @t among the others (after its priority): its key, or
 * its sharded collective's. */
uint64_t wk_order_key(const struct wk_tensor *t);
/* Whether partition @a goes before @b in the order every rank shares:
 * (priority, key or collective, then seq; a collective's pieces row by
 * row). */
bool wk_part_before(const struct wk_part *a, const struct wk_part *b);
/* A push-pull of a laid-out tensor into the scheduler: its partitions. */
void wk_sched_take(struct pbox *px, struct pbox_handle *op);
/* The heap of partitions: a partition in (0, or -1 out of memory), the top out. */
int wk_heap_push(struct pbox *px, struct wk_part *p);
void wk_heap_pop(struct pbox *px);
/* @p (in the heap) out of it. */
void wk_heap_remove(struct pbox *px, const struct wk_part *p);
/* Whether @op's partitions go in rank 0's order ([job] leader_order). */
bool wk_ordered(const struct pbox *px, const struct pbox_handle *op);
/* The turns' heap's top out (px->net.es.turns: empty pushes). */
void wk_turns_pop(struct pbox *px);
/* The credit window @credit bytes, and the retransmit timeout's floor the
 * time to drain it. */
void wk_set_credit(struct pbox *px, uint64_t credit);

#endif /* PBOX_WK_SCHED_H */
