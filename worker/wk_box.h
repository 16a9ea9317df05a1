/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_BOX_H
#define PBOX_WK_BOX_H

#include "wk_ctx.h"

/* ---- box.c: the box's client (rank 0) --------------------------------------- */

/* The endpoints of every box of [box] control, each box's connection
 * opened and authenticated (boxes that do not answer left out, where the
 * job may go on without them); 0, or -1 with @msg. */
int wk_boxes_endpoints(struct pbox *px, struct wk_box_eps *eps, uint64_t deadline, char *msg,
		       size_t cap);
/* Put a segment on each box with chunks in it (REGISTER the first, GROW
 * the others): at once, or, with @later, as requests appended to it for
 * the box client's thread; 0, or -1 with @msg. */
int wk_box_segment(struct pbox *px, uint8_t dtype, const uint32_t *base, const uint32_t *count,
		   struct wk_box_batch *later, uint64_t deadline, char *msg, size_t cap);
void wk_box_batch_free(struct wk_box_batch *bb);
/* The box client's thread (started on first use) takes @bb (emptied) and
 * sends it before @deadline; PBOX_OK, or a failure code. Then, on the
 * engine's later turns, wk_box_async_poll(): 0 still under way, 1 done,
 * -1 failed with @msg. wk_box_client_stop(): the thread ends (@now: an
 * exchange under way cut short) and is gone. */
int wk_box_async(struct pbox *px, struct wk_box_batch *bb, uint64_t deadline);
int wk_box_async_poll(struct pbox *px, char *msg, size_t cap);
void wk_box_client_stop(struct pbox *px, bool now);
/* Close every box's control connection (@unregister: say so first). */
void wk_boxes_close(struct pbox *px, bool unregister);

#endif /* PBOX_WK_BOX_H */
