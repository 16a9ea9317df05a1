/* SPDX-License-Identifier: BSD-3-Clause */
/* The unified layout: Theorem 1 weights and stride-scheduled chunk assignment. */
#include "layout.h"

#include <stdlib.h>

void lay_weights(const struct lay_in *in, uint64_t *w)
{
	uint64_t b = 0, gpu;
	uint32_t e, r;

	for (e = 0; e < in->n_eps; e++)
		b += in->ep_kbps[e];
	if (b == 0) { /* no box: the SS_GPUs alone */
		for (e = 0; e < in->n_eps; e++)
			w[e] = 0;
		gpu = 1;
	} else if (b >= (uint64_t)in->n * in->worker_kbps) { /* k >= n: all on the box */
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

double lay_box_share(uint32_t n, double k)
{
	if (k <= 0)
		return 0;
	if (k >= n)
		return 1;
	return 2.0 * k * (n - 1) / ((double)n * n + k * n - 2 * k);
}

double lay_ssgpu_share(uint32_t n, double k)
{
	if (k >= n)
		return 0;
	return (n - k) / ((double)n * n + k * n - 2 * k);
}

typedef unsigned __int128 u128;

struct heap {
	u128 *pass;
	uint32_t *u; /* unit at each heap slot */
	uint32_t n;
};

static int heap_less(const struct heap *h, uint32_t a, uint32_t b)
{
	u128 pa = h->pass[h->u[a]], pb = h->pass[h->u[b]];

	return pa < pb || (pa == pb && h->u[a] < h->u[b]);
}

static void heap_swap(struct heap *h, uint32_t a, uint32_t b)
{
	uint32_t t = h->u[a];

	h->u[a] = h->u[b];
	h->u[b] = t;
}

static void heap_down(struct heap *h, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, m = i;

		if (l < h->n && heap_less(h, l, m))
			m = l;
		if (l + 1 < h->n && heap_less(h, l + 1, m))
			m = l + 1;
		if (m == i)
			return;
		heap_swap(h, i, m);
		i = m;
	}
}

static u128 stride(uint64_t bytes, uint64_t w)
{
	return ((u128)bytes << 64) / w;
}

int lay_assign(const uint64_t *w, uint32_t n_units, const uint32_t *chunk_bytes, uint32_t n_chunks,
	       uint32_t *unit_of, uint32_t *local_of, uint32_t *count)
{
	struct heap h = {.pass = calloc(n_units ? n_units : 1, sizeof(u128)),
			 .u = calloc(n_units ? n_units : 1, sizeof(uint32_t))};
	uint32_t c, u, smax = 1;
	int rc = -1;

	if (!h.pass || !h.u)
		goto out;
	for (c = 0; c < n_chunks; c++)
		if (chunk_bytes[c] > smax)
			smax = chunk_bytes[c];
	for (u = 0; u < n_units; u++) {
		count[u] = 0;
		if (!w[u])
			continue;
		/* half a stride in: the heaviest units start first, evenly spread */
		h.pass[u] = stride(smax, w[u]) / 2;
		h.u[h.n++] = u;
	}
	if (!h.n)
		goto out;
	for (u = h.n / 2 + 1; u-- > 0;)
		heap_down(&h, u);
	for (c = 0; c < n_chunks; c++) {
		u = h.u[0];
		unit_of[c] = u;
		local_of[c] = count[u]++;
		h.pass[u] += stride(chunk_bytes[c], w[u]);
		heap_down(&h, 0);
	}
	rc = 0;
out:
	free(h.pass);
	free(h.u);
	return rc;
}
