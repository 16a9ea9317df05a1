/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_FLOW_H
#define PBOX_WK_FLOW_H

#include <netinet/in.h>

#include "wk_ctx.h"

struct eng; /* the transport's send and receive batches (udp.c) */

/* ---- flow.c: the send schedule and loss recovery (the engine thread's) ---- */

/* New push-pulls from the caller's queue: into the heap, or parked until
 * their tensor is agreed. */
void wk_flow_take_new(struct pbox *px);
/* New fragments, the most urgent partition first, while credit, window
 * and pacing allow; the number sent. */
int wk_flow_send_new(struct pbox *px, struct eng *e, uint64_t now);
/* Expired fragments probed or sent again; the number of pushes resent. */
int wk_flow_retransmit(struct pbox *px, struct eng *e, uint64_t now);
/* The oldest fragment of an SS gone quiet, probed (tail loss). */
void wk_flow_tail_probe(struct pbox *px, struct eng *e, uint64_t now);
/* ns from @now to the next expiry or pacing slot, at most @cap. */
uint64_t wk_flow_next_expiry(struct pbox *px, uint64_t now, uint64_t cap);
/* A RESULT, ACK, NACK, DONE or ERROR from an SS for one of our fragments. */
void wk_flow_result(struct pbox *px, struct eng *e, const struct pbox_hdr *h, const uint8_t *p,
		    const struct sockaddr_in *from, uint64_t now);

#endif /* PBOX_WK_FLOW_H */
