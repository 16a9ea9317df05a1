/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_LOCAL_RENEW_H
#define PBOX_WK_LOCAL_RENEW_H

#include "wk_ctx.h"
#include "local.h"

/* ---- local_renew.c: the machine renewed (pbox_shrink(), pbox_rejoin()) ---- */

/* renewal with local aggregation (pbox_shrink(), pbox_rejoin()) */
int wk_local_can_renew(struct pbox *px, const char *fn, bool idle);
int wk_local_follow_renew(struct pbox *px, const char *fn, bool shrink);
void wk_local_quiet(struct pbox *px);
void wk_local_renet(struct pbox *px);
int wk_local_renew(struct pbox *px, int rc, const uint32_t *gone, uint32_t n_gone);
int wk_local_rejoin_wait(struct pbox *px);
/* Whether @m belongs to another incarnation of the machine (dropped):
 * GONE and RENEW open the next one. */
bool wk_lc_stale(const struct wk_local *lc, const struct lmsg *m);
/* The others' thread: what pbox_shrink() (or pbox_rejoin()) here waits for. */
void wk_lc_told_renewal(struct pbox *px, int code, const char *msg);
/* The others' thread, RENEW: the machine's next incarnation @epoch, the
 * world without the machines GONE named; -1 where they make no sense. */
int wk_lc_renew_here(struct pbox *px, uint32_t epoch);
/* Leader's thread: the network job was renewed (or not: renew_rc); the
 * machine follows, and its ranks are told. */
void wk_lc_leader_renew(struct pbox *px);

#endif /* PBOX_WK_LOCAL_RENEW_H */
