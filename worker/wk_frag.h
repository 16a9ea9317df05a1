/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_FRAG_H
#define PBOX_WK_FRAG_H

#include "wk_ctx.h"

struct eng; /* the transport's send and receive batches (udp.c) */

/* ---- frag.c: our fragments on their way (the engine thread's) ---- */

/* The FIFOs of sent fragments: append (-1: out of memory); the head's
 * fragment if it is still the send it recorded (stale heads dropped). */
int wk_ring_push(struct wk_ring *r, uint32_t g, uint32_t stamp);
struct wk_frag *wk_ring_head(struct pbox *px, struct wk_ring *r, uint32_t *g);
/* The transmit path: the batch out; one datagram, paced and counted; an
 * ERROR (@code) or payload-less answer to the sender of @req. */
void wk_tx_flush(struct pbox *px, struct eng *e);
void wk_tx_add(struct pbox *px, struct eng *e, uint32_t ip_be, uint16_t port,
	       const struct pbox_hdr *h, const void *payload, uint16_t len, bool gso);
/* The same, not booked on the link's clock where @booked (booked before:
 * wk_pace_book(), @n datagrams of @len bytes). */
void wk_tx_send(struct pbox *px, struct eng *e, uint32_t ip_be, uint16_t port,
		const struct pbox_hdr *h, const void *payload, uint16_t len, bool gso, bool booked);
void wk_pace_book(struct pbox *px, uint32_t n, uint16_t len);
void wk_tx_reply(struct pbox *px, struct eng *e, const struct nic_addr *to,
		 const struct pbox_hdr *req, uint8_t op, uint16_t code);
/* Pacing: the link booked past a burst; no room for a quantum; when the
 * last datagram queued will have left. */
bool wk_pace_busy(const struct pbox *px);
bool wk_pace_short(const struct pbox *px);
uint64_t wk_departure(const struct pbox *px);
/* Credit and window: @op has bytes in flight now; partition @p may go
 * beyond the credit; a timeout halves the window. */
void wk_active_add(struct pbox_handle **head, struct pbox_handle *op);
bool wk_beyond_credit(struct pbox *px, struct wk_part *p);
/* Whether the turns' top partition @p goes out beyond their window. */
bool wk_beyond_window(const struct pbox *px, const struct wk_part *p);
void wk_cwnd_cut(struct pbox *px, uint64_t now);
/* The counters for pbox_stats(); px->mu held. */
void wk_stats_locked(struct pbox *px);
/* What this rank's push of @f, and its result to this rank, carry: its
 * bytes or their compressed form (the push's compressor, the result's);
 * 0 where a rooted tensor's mode gives this rank none (WIRE.md). */
uint16_t wk_push_len(const struct pbox *px, const struct wk_frag *f);
uint16_t wk_result_len(const struct pbox *px, const struct wk_frag *f);
/* What @f's push holds of the credit: its bytes; 0 for an empty push. */
uint16_t wk_charge(const struct pbox *px, const struct wk_frag *f);
/* Fragment @g's compressed push of its round (NULL: out of memory,
 * raised). */
const uint8_t *wk_comp_payload(struct pbox *px, uint32_t g);
/* A result for our fragment @g, of compressor @comp (its dtype byte's
 * high nibble): 1 taken (its op completed with its last fragment), 0 a
 * duplicate, stale, or not what the push asked for. */
int wk_deliver(struct pbox *px, uint32_t g, const void *buf, uint16_t len, uint8_t comp,
	       uint32_t round);

#endif /* PBOX_WK_FRAG_H */
