/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The unified layout (BytePS §4.1, DESIGN.md §2): which summation service
 * sums each chunk. Pure functions of the inputs every rank shares, integer
 * arithmetic only, so every rank computes the same assignment.
 *
 * n workers of bandwidth B each and a box of bandwidth k·B (the sum of its
 * endpoint weights). With b = box bandwidth and w = worker bandwidth, the
 * Theorem 1 shares of the model M are, multiplied through by w·(n²+kn−2k):
 *
 *   box endpoint e:  2(n−1)·b_e          (all endpoints: 2(n−1)·b = k·M_SSCPU)
 *   each SS_GPU:     n·w − b             (= (n−k)·w, M_SSGPU)
 *
 * so the weights are exact integers. k ≥ n: the box takes everything;
 * k = 0: the SS_GPUs share equally (all-reduce).
 *
 * Two other layouts, for comparison (perf/cluster) and for clusters where
 * one side should stay idle: LAY_PS sends every chunk to the box (BytePS's
 * parameter-server mode, endpoints weighted by bandwidth), LAY_SSGPU to the
 * workers' SS_GPUs only (the box unused, whatever k).
 */
#ifndef PBOX_LAYOUT_H
#define PBOX_LAYOUT_H

#include <stdint.h>

/* Units are numbered: box endpoints 0..n_eps-1, then SS_GPU of rank r at
 * n_eps + r. */
enum lay_mode { LAY_UNIFIED, LAY_PS, LAY_SSGPU };

struct lay_in {
	uint32_t n;		 /* workers */
	uint64_t worker_kbps;	 /* w */
	uint32_t n_eps;		 /* box endpoints; 0: no box */
	const uint64_t *ep_kbps; /* b_e */
	enum lay_mode mode;
};

/* "unified", "ps", "ssgpu" ([tuning] layout); "?" past the end. */
const char *lay_mode_name(enum lay_mode mode);

/* The layout weight of every unit (n_eps + n entries) into @w. */
void lay_weights(const struct lay_in *in, uint64_t *w);

/* Theorem 1 as fractions of M, for checking: the whole box's share and one
 * SS_GPU's share at (n, k); under LAY_PS and LAY_SSGPU, that layout's. */
double lay_box_share(uint32_t n, double k, enum lay_mode mode);
double lay_ssgpu_share(uint32_t n, double k, enum lay_mode mode);

/*
 * Weights @w of @n_units units fitted to @n_chunks new chunks when some
 * units can take at most @cap[u] of them (a box endpoint's memory; UINT32_MAX:
 * no cap): a unit whose share of the chunks would pass its cap gets the
 * weight that makes its share its cap, the others share what is left in
 * their own proportions (Theorem 1's among themselves), so that every unit's
 * chunks stay spread over the whole batch. Where the capped units are all
 * that have weight and cannot take everything, @spill gives the uncapped
 * units (the SS_GPUs) equal weights for the rest; without it, or with none,
 * -1 (the units cannot hold the chunks). Integer arithmetic: every rank
 * fits alike.
 */
int lay_fit(uint64_t *w, const uint32_t *cap, uint32_t n_units, uint32_t n_chunks, int spill);

/*
 * Assign @n_chunks chunks (bytes of each in @chunk_bytes, in the order all
 * ranks agree on) to @n_units units of weights @w by smooth weighted round
 * robin over bytes: each unit's bytes stay within a chunk or two of its
 * exact share at every prefix. A unit with a @cap (NULL: none) takes no
 * more than cap[u] chunks: once it has them it leaves the round robin.
 * Fills @unit_of and @local_of (the chunk's index among its unit's chunks)
 * and @count (chunks per unit). 0, or -1 when no unit has weight (or room)
 * for a chunk.
 */
int lay_assign(const uint64_t *w, const uint32_t *cap, uint32_t n_units,
	       const uint32_t *chunk_bytes, uint32_t n_chunks, uint32_t *unit_of,
	       uint32_t *local_of, uint32_t *count);

#endif /* PBOX_LAYOUT_H */
