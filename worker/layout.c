/* SPDX-License-Identifier: BSD-3-Clause */
/* The unified layout: Theorem 1 weights and chunk assignment by smooth weighted round robin. */
#include "layout.h"
#include "cfg_worker.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *lay_mode_name(enum lay_mode mode)
{
	return (unsigned)mode <= LAY_SSGPU ? cfg_layout_names[mode] : "?";
}

void lay_weights(const struct lay_in *in, uint64_t *w)
{
	uint64_t b = 0, gpu;
	uint32_t e, r;

	for (e = 0; e < in->n_eps; e++)
		b += in->ep_kbps[e];
	if (b == 0 || in->mode == LAY_SSGPU) { /* no box: the SS_GPUs alone */
		for (e = 0; e < in->n_eps; e++)
			w[e] = 0;
		gpu = 1;
	} else if (in->mode == LAY_PS || b >= (uint64_t)in->n * in->worker_kbps) {
		/* k >= n: all on the box */
		for (e = 0; e < in->n_eps; e++)
			w[e] = in->ep_kbps[e];
		gpu = 0;
	} else {
		for (e = 0; e < in->n_eps; e++)
			w[e] = 2 * (uint64_t)(in->n - 1) * in->ep_kbps[e];
		gpu = (uint64_t)in->n * in->worker_kbps - b;
	}
	for (r = 0; r < in->n; r++)
		w[in->n_eps + r] = gpu;
}

double lay_box_share(uint32_t n, double k, enum lay_mode mode)
{
	if (k <= 0 || mode == LAY_SSGPU)
		return 0;
	if (k >= n || mode == LAY_PS)
		return 1;
	return 2.0 * k * (n - 1) / ((double)n * n + k * n - 2 * k);
}

double lay_ssgpu_share(uint32_t n, double k, enum lay_mode mode)
{
	if (k <= 0 || mode == LAY_SSGPU)
		return 1.0 / n;
	if (k >= n || mode == LAY_PS)
		return 0;
	return (n - k) / ((double)n * n + k * n - 2 * k);
}

typedef __int128 i128;

/*
 * Smooth weighted round robin by bytes: every unit's credit grows by its
 * weight times the chunk's bytes; the unit with the most credit takes the
 * chunk and pays the total weight times its bytes. Credits always sum to
 * zero, and each unit stays within a chunk or two of its exact
 * share at every prefix, whatever the weights (stride scheduling, which
 * looks only at the lightest units' passes, lets a heavy unit drift by
 * the ratio of the weights).
 */
/* An uncapped unit's weight when it takes what full ones leave: large, so
 * that the full units' weights, made from it, keep their precision. */
#define LAY_SPILL_W (1ull << 24)

int lay_fit(uint64_t *w, const uint32_t *cap, uint32_t n_units, uint32_t n_chunks, int spill)
{
	uint8_t *capped = calloc(n_units ? n_units : 1, 1);
	bool more = true;
	uint64_t left = n_chunks;
	i128 free_w = 0;
	uint32_t u;
	int rc = -1;

	if (!capped)
		return -1;
	for (u = 0; u < n_units; u++)
		free_w += w[u];
	/* Cap the units whose share of what the others leave passes their cap,
	 * until none does: capping one only raises the others' shares. */
	while (more && free_w > 0) {
		more = false;
		for (u = 0; u < n_units; u++)
			if (!capped[u] && w[u] && cap[u] != UINT32_MAX &&
			    (i128)cap[u] * free_w < (i128)left * w[u]) {
				capped[u] = 1;
				free_w -= w[u];
				left -= cap[u];
				more = true;
			}
	}
	if (free_w == 0 && left > 0) { /* the capped units cannot take it all */
		for (u = 0; spill && u < n_units; u++)
			if (cap[u] == UINT32_MAX) {
				w[u] = LAY_SPILL_W;
				free_w += LAY_SPILL_W;
			}
		if (free_w == 0)
			goto out;
	}
	/* share cap/n_chunks: the weight cap·W_free/left against the others' W_free */
	for (u = 0; u < n_units; u++) /* left > 0: a unit is capped below its share of it */
		if (capped[u])
			w[u] = (uint64_t)((i128)cap[u] * free_w / (i128)left);
	rc = 0;
out:
	free(capped);
	return rc;
}

int lay_assign(const uint64_t *w, const uint32_t *cap, uint32_t n_units,
	       const uint32_t *chunk_bytes, uint32_t n_chunks, uint32_t *unit_of,
	       uint32_t *local_of, uint32_t *count)
{
	i128 *cur = calloc(n_units ? n_units : 1, sizeof(i128)), total = 0;
	uint32_t *live = calloc(n_units ? n_units : 1, sizeof(uint32_t)), n_live = 0, c, u;
	int rc = -1;

	if (!cur || !live)
		goto out;
	for (u = 0; u < n_units; u++) {
		count[u] = 0;
		if (w[u] && (!cap || cap[u])) {
			live[n_live++] = u;
			total += w[u];
		}
	}
	for (c = 0; c < n_chunks; c++) {
		i128 s = chunk_bytes[c];
		uint32_t best, i;

		if (!n_live)
			goto out;
		best = live[0];
		for (i = 0; i < n_live; i++) {
			u = live[i];
			cur[u] += (i128)w[u] * s;
			if (cur[u] > cur[best]) /* ties: the lower unit */
				best = u;
		}
		cur[best] -= total * s;
		unit_of[c] = best;
		local_of[c] = count[best]++;
		if (cap && count[best] == cap[best]) { /* full: out of the round robin */
			for (i = 0; live[i] != best; i++)
				;
			memmove(live + i, live + i + 1, (n_live - i - 1) * sizeof(*live));
			n_live--;
			total -= w[best];
		}
	}
	rc = 0;
out:
	free(cur);
	free(live);
	return rc;
}
