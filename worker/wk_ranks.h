/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_RANKS_H
#define PBOX_WK_RANKS_H

#include "wk_ctx.h"

/* ---- ranks.c: who is who --------------------------------------------------- */

void wk_log(const struct pbox *px, unsigned level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* "rank W (a.b.c.d:port)" of network rank @rank, W its world rank. */
const char *wk_peer_name(const struct pbox *px, uint32_t rank, char *buf, size_t cap);
/* The world rank of network rank @rank. */
uint32_t wk_local_world_rank(const struct pbox *px, uint32_t rank);
/* The world's size and this rank's place in it (with local aggregation
 * the network job's are the machines'). */
uint32_t wk_world_n(const struct pbox *px);
uint32_t wk_world_rank(const struct pbox *px);
/*
 * Local aggregation's plan: after the rendezvous, the ranks grouped by
 * machine (a leader then takes the network job's rank and world of
 * machines); px->loc stays NULL with a machine per rank.
 */
int wk_local_plan(struct pbox *px);
/* Whether this rank leaves the network to its machine's leader. */
bool wk_local_led(const struct pbox *px);
/* wakes local.c's thread: an op of the network job completed, a failure */
void wk_local_kick(const struct pbox *px);

#endif /* PBOX_WK_RANKS_H */
