/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_UDP_H
#define PBOX_WK_UDP_H

#include "wk_ctx.h"

/* ---- udp.c: kernel UDP sockets (transport.h); their state is the context --- */

extern const struct wk_transport wk_udp_transport;
/* The engine's send and receive batches; NULL out of memory. */
struct eng *wk_udp_batch_new(const struct pbox *px);
void wk_udp_batch_free(struct eng *e);
/* Room for a reply's payload of up to 2 bytes that lasts until the batch
 * is flushed (the batch flushed first when full). */
uint8_t *wk_udp_slot(struct pbox *px, struct eng *e);

#endif /* PBOX_WK_UDP_H */
