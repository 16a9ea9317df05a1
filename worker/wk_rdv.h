/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_RDV_H
#define PBOX_WK_RDV_H

#include "wk_ctx.h"

/* ---- rdv.c: the rendezvous --------------------------------------------------- */

/* [rendezvous] address: meet the other ranks there, and fill in [job] id
 * and token, [peers] and this rank's [data] address and port. */
int wk_rendezvous(struct pbox *px, uint64_t deadline);
/* The key JOINs prove [rendezvous] secret @secret with (BLAKE2b). */
void wk_secret_key(const char *secret, uint8_t *k);

#endif /* PBOX_WK_RDV_H */
