/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_SERVE_H
#define PBOX_WK_SERVE_H

#include <netinet/in.h>

#include "wk_ctx.h"

struct eng; /* the transport's send and receive batches (udp.c) */

/* ---- serve.c: this rank's SS_GPU (the engine thread's) ---- */

/* A PUSH or PROBE from a rank to our SS_GPU: summed, answered or fanned
 * out. */
void wk_serve_push(struct pbox *px, struct eng *e, const struct pbox_hdr *h, const uint8_t *p,
		   const struct sockaddr_in *from);
/* The pushes held for chunks not laid out then (a tensor agreed before this
 * rank read GREW), summed where their chunks are laid out now: how many. */
int wk_serve_early(struct pbox *px, struct eng *e);
/* Those still held, let go (the incarnation's end). */
void wk_serve_early_free(struct pbox *px);
/* Our own push of fragment @g (header @h, signed) into our own SS_GPU. */
void wk_serve_own(struct pbox *px, struct eng *e, uint32_t g, const struct pbox_hdr *h,
		  const uint8_t *payload);
/* A round of ours in our own SS_GPU waiting past the deadline: raised,
 * naming the ranks whose pushes are missing. */
void wk_serve_overdue(struct pbox *px, uint64_t now);

#endif /* PBOX_WK_SERVE_H */
