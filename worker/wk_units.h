/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_UNITS_H
#define PBOX_WK_UNITS_H

#include "wk_ctx.h"

/* ---- units.c: the summation services a rank addresses ---------------------- */

/* The summation services from the boxes' endpoints @eps (NULL: none), no
 * chunks yet; each endpoint's room caps what the layout puts on it. */
int wk_layout_init(struct pbox *px, uint32_t frag_size, const struct wk_box_eps *eps);
/*
 * Lay out @n tensors, all of one dtype, after those laid out before: their
 * chunks follow the job's, each unit's new chunks follow its earlier ones
 * (unit u's are its [base[u], base[u] + count[u])), and this rank's SS_GPU
 * gets a segment for its own. Every rank calls it with the same tensors in
 * the same order, and gets the same layout.
 */
int wk_layout_add(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, uint32_t *base,
		  uint32_t *count);
/* The short chunks (a tensor's last) among unit @u's [from, from + n), as
 * endpoint @ep of an SS would list them (counted from @from): their
 * number, or UINT32_MAX when more than @max. */
struct ss_short;
uint32_t wk_unit_shorts(const struct pbox *px, uint32_t u, uint16_t ep, uint32_t from, uint32_t n,
			struct ss_short *out, uint32_t max);
/* The runs of async chunks (stores) among unit @u's [from, from + n), as
 * endpoint @ep of a box's REGISTER lists them (counted from @from): their
 * number, or UINT32_MAX when more than @max. */
struct nic_ctl_async;
uint32_t wk_unit_asyncs(const struct pbox *px, uint32_t u, uint32_t ep, uint32_t from, uint32_t n,
			struct nic_ctl_async *out, uint32_t max);
/* The unit whose address is @ip_be:@port, or UINT32_MAX. */
uint32_t wk_unit_of(const struct pbox *px, uint32_t ip_be, uint16_t port);

/* Fragment @g's offset in its tensor @t. */
static inline uint64_t wk_frag_off(const struct pbox *px, uint32_t g, const struct wk_tensor *t)
{
	return (uint64_t)(g / px->net.fpc - t->chunk0) * px->net.chunk_size +
	       (uint64_t)(g % px->net.fpc) * px->net.frag_size;
}

#endif /* PBOX_WK_UNITS_H */
