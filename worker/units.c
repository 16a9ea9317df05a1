/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The units of a context (every summation service this rank addresses: the
 * box's endpoints, then the ranks' SS_GPUs), and the layout applied to them:
 * wk_layout_init() makes the units once the box's endpoints are known,
 * wk_layout_add() lays new tensors out over them (layout.c's Theorem 1
 * weights) and gives this rank's SS_GPU its chunks; the pacing rate, and the
 * source address -> unit table the engine reads results by.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"

/* Source address -> unit, for results: open addressing on (ip, port). */
static uint32_t hash_slot(uint32_t ip_be, uint16_t port, uint32_t cap)
{
	return (uint32_t)(((uint64_t)ip_be * 0x9e3779b97f4a7c15ull ^ port * 0x2545f491u) >> 20) &
	       (cap - 1);
}

static int build_hash(struct pbox *px)
{
	uint32_t cap = 16, u;

	while (cap < 2 * px->net.n_units)
		cap *= 2;
	px->net.es.hash_cap = cap;
	px->net.es.hash_unit = malloc(cap * sizeof(uint32_t));
	if (!px->net.es.hash_unit)
		return -1;
	memset(px->net.es.hash_unit, 0xff, cap * sizeof(uint32_t));
	for (u = 0; u < px->net.n_units; u++) {
		uint32_t s = hash_slot(px->net.unit[u].ip_be, px->net.unit[u].port, cap);

		while (px->net.es.hash_unit[s] != UINT32_MAX)
			s = (s + 1) & (cap - 1);
		px->net.es.hash_unit[s] = u;
	}
	return 0;
}

uint32_t wk_unit_of(const struct pbox *px, uint32_t ip_be, uint16_t port)
{
	uint32_t s = hash_slot(ip_be, port, px->net.es.hash_cap), u;

	while ((u = px->net.es.hash_unit[s]) != UINT32_MAX) {
		if (px->net.unit[u].ip_be == ip_be && px->net.unit[u].port == port)
			return u;
		s = (s + 1) & (px->net.es.hash_cap - 1);
	}
	return UINT32_MAX;
}

uint32_t wk_unit_shorts(const struct pbox *px, uint32_t u, uint16_t ep, uint32_t from, uint32_t n,
			struct ss_short *out, uint32_t max)
{
	const struct wk_unit *un = &px->net.unit[u];
	uint32_t k, f, got = 0;

	for (k = from; k < from + n; k++) {
		uint32_t g = un->global[k], bytes = 0;

		for (f = 0; f < px->net.fpc; f++)
			bytes += px->net.es.frag[(size_t)g * px->net.fpc + f].len;
		if (bytes < px->net.chunk_size) {
			if (got == max)
				return UINT32_MAX;
			out[got++] = (struct ss_short){.ep = ep, .chunk = k - from, .bytes = bytes};
		}
	}
	return got;
}

uint32_t wk_unit_asyncs(const struct pbox *px, uint32_t u, uint32_t ep, uint32_t from, uint32_t n,
			struct nic_ctl_async *out, uint32_t max)
{
	const struct wk_unit *un = &px->net.unit[u];
	uint32_t got = 0;

	for (uint32_t k = from; k < from + n; k++) {
		uint32_t m = px->net.chunk_mode[un->global[k]];

		if (m >> 16 != SS_ASYNC)
			continue;
		if (got && out[got - 1].root == (m & 0xffff) &&
		    out[got - 1].chunk + out[got - 1].count == k - from) {
			out[got - 1].count++;
			continue;
		}
		if (got == max)
			return UINT32_MAX;
		out[got++] = (struct nic_ctl_async){
			.ep = ep, .chunk = k - from, .count = 1, .root = m & 0xffff};
	}
	return got;
}

/* The rooted chunks among unit @u's chunks [from, from + n), numbered from
 * @from on endpoint @ep, into @out (room for @n). Their count. */
static uint32_t unit_roots(const struct pbox *px, uint32_t u, uint16_t ep, uint32_t from,
			   uint32_t n, struct ss_root *out)
{
	const struct wk_unit *un = &px->net.unit[u];
	uint32_t got = 0;

	for (uint32_t k = from; k < from + n; k++) {
		uint32_t m = px->net.chunk_mode[un->global[k]];

		if (m)
			out[got++] = (struct ss_root){.ep = ep,
						      .chunk = k - from,
						      .mode = (uint8_t)(m >> 16),
						      .root = (uint16_t)(m & 0xffff)};
	}
	return got;
}

/* This rank's SS_GPU grows by a segment: its chunks [base, base + count). */
static int ssgpu_add(struct pbox *px, uint8_t dtype, uint32_t base, uint32_t count)
{
	struct ss_job_desc d = {.id = px->net.job,
				.mac = px->net.mac,
				.n = (uint16_t)px->net.n,
				.dtype = dtype,
				.frag_size = px->net.frag_size,
				.chunk_size = px->net.chunk_size,
				.n_eps = 1,
				.comp_ppm = wk_comp_ppm(px, dtype),
				.in_order = px->cfg.job.deterministic,
				.staleness = px->cfg.job.staleness};
	struct ss_short *shorts;
	struct ss_root *roots;
	struct nic_addr *ranks;
	struct ss_job *j, **tail;
	const char *why;
	size_t bytes, align;
	void *mem;

	if (!count)
		return PBOX_OK; /* nothing to serve: the box and the peers sum these */
	d.ep_chunks[0] = count;
	d.ep_base[0] = base;
	shorts = calloc(count, sizeof(*shorts));
	roots = calloc(count, sizeof(*roots));
	ranks = calloc(px->net.n, sizeof(*ranks));
	if (!shorts || !roots || !ranks) {
		free(shorts);
		free(roots);
		free(ranks);
		return wk_err(PBOX_ENOMEM, "SS_GPU: out of memory");
	}
	for (uint32_t r = 0; r < px->net.n; r++) { /* pushes only from the ranks' own addresses */
		ranks[r].ip_be = px->net.unit[px->net.n_eps + r].ip_be;
		ranks[r].port = px->net.unit[px->net.n_eps + r].port;
	}
	d.ranks = ranks;
	d.shorts = shorts;
	d.n_shorts = wk_unit_shorts(px, px->net.self_unit, 0, base, count, shorts, count);
	d.roots = roots;
	d.n_roots = unit_roots(px, px->net.self_unit, 0, base, count, roots);
	why = ss_job_desc_check(&d);
	if (why) {
		free(shorts);
		free(roots);
		free(ranks);
		return wk_err(PBOX_EINVAL, "SS_GPU: %s", why);
	}
	bytes = ss_job_bytes(&d, 0);
	align = ss_job_align(&d);
	mem = aligned_alloc(align, (bytes + align - 1) / align * align);
	if (!mem) {
		free(shorts);
		free(roots);
		free(ranks);
		return wk_err(PBOX_ENOMEM, "SS_GPU: %zu bytes of state", bytes);
	}
	j = ss_job_init(mem, &d, 0, sum_ops_best());
	free(shorts);
	free(roots);
	free(ranks);
	for (tail = &px->net.es.ssj; *tail; tail = &(*tail)->next)
		;
	*tail = j;
	return PBOX_OK;
}

/*
 * The rate this rank sends at: its line rate, or less where the layout
 * gives some box endpoint more than its bandwidth can take in the time our
 * own link needs (every rank sends each endpoint the same bytes). Then
 * every rank paces at the rate the slowest resource drains, and no queue
 * builds in front of it (where timers would run and fire). Our link
 * carries our pushes to others and our SS_GPU's results to the n-1 peers;
 * a peer's SS_GPU takes as much in as ours sends out. Under the unified
 * layout the box and the links finish together (Theorem 1): the line rate.
 * Under [tuning] layout = ps with k < n: k/n of it.
 */
static uint64_t pace_kbps(const struct pbox *px)
{
	uint64_t w = px->cfg.data.bandwidth_mbps * 1000;
	double own = (double)px->net.unit[px->net.self_unit].bytes;
	double t_link = ((double)px->net.total_bytes - own + (px->net.n - 1) * own) / (double)w,
	       t = t_link;

	for (uint32_t e = 0; e < px->net.n_eps; e++)
		if (px->net.unit[e].kbps && px->net.unit[e].bytes) {
			double te = (double)px->net.n * (double)px->net.unit[e].bytes /
				    (double)px->net.unit[e].kbps;

			if (te > t)
				t = te;
		}
	return t > t_link && t_link > 0 ? (uint64_t)((double)w * t_link / t) + 1 : w;
}

int wk_layout_init(struct pbox *px, uint32_t frag_size, const struct wk_box_eps *eps)
{
	uint32_t n_eps = eps ? eps->n : 0;
	struct lay_in in = {.n = px->net.n,
			    .worker_kbps = px->cfg.data.bandwidth_mbps * 1000,
			    .n_eps = n_eps,
			    .ep_kbps = eps ? eps->kbps : NULL,
			    .mode = (enum lay_mode)px->cfg.tuning.layout};
	uint64_t *w, box_kbps = 0;
	uint32_t u;

	if (in.mode == LAY_PS && n_eps == 0)
		return wk_err(PBOX_EINVAL, "pbox_start: [tuning] layout = ps needs a box "
					   "([box] control)");
	px->net.frag_size = frag_size;
	px->net.chunk_size = (uint32_t)px->cfg.tuning.chunk_size;
	px->net.fpc = px->net.chunk_size / frag_size;
	px->net.n_eps = n_eps;
	px->net.n_units = n_eps + px->net.n;
	px->net.self_unit = n_eps + px->net.rank;
	px->net.unit = calloc(px->net.n_units, sizeof(*px->net.unit));
	w = calloc(px->net.n_units, sizeof(*w));
	if (!px->net.unit || !w) {
		free(w);
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory for the layout");
	}
	px->net.box_txref = eps ? eps->txref : 0;
	for (u = 0; u < n_eps; u++) {
		char ip[INET_ADDRSTRLEN];

		px->net.unit[u].ip_be = eps->ip[u];
		px->net.unit[u].port = eps->port[u];
		px->net.unit[u].kbps = eps->kbps[u];
		px->net.unit[u].room = eps->txref ? eps->room[u] : UINT64_MAX;
		px->net.unit[u].rank = -1;
		box_kbps += eps->kbps[u];
		inet_ntop(AF_INET, &eps->ip[u], ip, sizeof(ip));
		snprintf(px->net.unit[u].name, sizeof(px->net.unit[u].name),
			 "box endpoint %u (%s:%u)", u, ip, eps->port[u]);
	}
	for (u = 0; u < px->net.n; u++) {
		struct wk_unit *un = &px->net.unit[n_eps + u];

		un->room = UINT64_MAX;
		un->ip_be = px->cfg.peers[u].ip_be;
		un->port = px->cfg.peers[u].port;
		un->rank = (int32_t)u;
		wk_peer_name(px, u, un->name, sizeof(un->name));
	}
	px->net.k = (double)box_kbps / (double)in.worker_kbps;
	lay_weights(&in, w);
	for (u = 0; u < px->net.n_units; u++)
		px->net.unit[u].weight = w[u];
	free(w);
	px->net.es.pace_kbps = in.worker_kbps;
	if (build_hash(px))
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	return PBOX_OK;
}

/* Grow *@p (of @old elements of @size) to @want elements; the new ones zero. */
static int grow_array(void *p, size_t size, size_t old, size_t want)
{
	void *v = realloc(*(void **)p, (want ? want : 1) * size);

	if (!v)
		return -1;
	memset((char *)v + old * size, 0, (want - old) * size);
	*(void **)p = v;
	return 0;
}

/* Chunks for @n tensors after the @c0 there are: each tensor's first, its
 * chunk and fragment counts; how many chunks they add, or -1 (wk_err()
 * says why) past the fragment index's range. */
static int64_t chunks_for(const struct pbox *px, struct wk_tensor *const *ts, uint32_t n,
			  uint32_t c0)
{
	uint32_t added = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t k = (ts[i]->bytes + px->net.chunk_size - 1) / px->net.chunk_size;

		if ((uint64_t)c0 + added + k > UINT32_MAX / px->net.fpc)
			return wk_err(PBOX_EINVAL,
				      "tensor key %" PRIu64 ": the tensors hold more than %u "
				      "fragments: raise [tuning] chunk_size",
				      ts[i]->key, UINT32_MAX),
			       -1;
		ts[i]->chunk0 = c0 + added;
		ts[i]->n_chunks = (uint32_t)k;
		ts[i]->n_frags =
			(uint32_t)((ts[i]->bytes + px->net.frag_size - 1) / px->net.frag_size);
		added += (uint32_t)k;
	}
	return added;
}

/* @added new chunks from @c0 on, each of @bytes, to the units @unit_of
 * chose (the unit's @local-th new chunk, after @base of its own), and
 * every new fragment's length. */
static void place_chunks(struct pbox *px, uint32_t c0, uint32_t added, const uint32_t *bytes,
			 const uint32_t *unit_of, const uint32_t *local, const uint32_t *base)
{
	for (uint32_t c = 0; c < added; c++) {
		struct wk_unit *un = &px->net.unit[unit_of[c]];

		px->net.chunk_unit[c0 + c] = unit_of[c];
		px->net.chunk_local[c0 + c] = base[unit_of[c]] + local[c];
		un->global[un->n_chunks++] = c0 + c;
		un->bytes += bytes[c];
	}
	for (uint32_t g = 0; g < added * px->net.fpc; g++) {
		uint32_t cb = bytes[g / px->net.fpc], off = (g % px->net.fpc) * px->net.frag_size;

		px->net.es.frag[(size_t)c0 * px->net.fpc + g].len =
			(uint16_t)(off >= cb			  ? 0
				   : cb - off < px->net.frag_size ? cb - off
								  : px->net.frag_size);
	}
}

/* The SS mode of a tensor of kind @kind (enum wk_kind). */
static uint8_t ss_mode_of(uint8_t kind)
{
	static const uint8_t mode[WK_KIND_COUNT] = {[WK_ALLREDUCE] = SS_ALLREDUCE,
						    [WK_REDUCE] = SS_REDUCE,
						    [WK_GATHER] = SS_BCAST,
						    [WK_BCAST] = SS_BCAST,
						    [WK_ASYNC] = SS_ASYNC};

	return mode[kind < WK_KIND_COUNT ? kind : WK_ALLREDUCE];
}

/*
 * The SS_GPU that sums chunk @c (of its own) of rooted tensor @t: a
 * shard's root's, where its sum is wanted (reduce-scatter) or its data
 * starts (all-gather), so that each rank's link carries the (n-1)/n of M
 * that is the bound (docs/workers.md); a broadcast's spread over the other
 * ranks' SS_GPUs, so that its root sends each byte once and the others
 * fan it out.
 */
static uint32_t rooted_unit(const struct pbox *px, const struct wk_tensor *t, uint32_t c)
{
	uint32_t r = t->root % px->net.n; /* below n: agreed so (a world that shrank: never used) */

	if (t->kind == WK_BCAST && px->net.n > 1)
		r = (t->root + 1 + c % (px->net.n - 1)) % px->net.n;
	return px->net.n_eps + r;
}

/* A chunk laid out by weight (else rooted). */
static bool by_weight(uint8_t kind)
{
	return kind == WK_ALLREDUCE || kind == WK_ASYNC;
}

/*
 * What the boxes' state costs for a segment of @dtype (@async: with
 * stores), as a box counts it (ss_job_bytes() with its transmit
 * references): each chunk its fragments' buffers and records; each segment
 * the job's header, peer table and the sections' alignment, on every
 * endpoint (an upper bound: as if each endpoint had a core of its own).
 */
static void box_costs(const struct pbox *px, uint8_t dtype, bool async, uint64_t *per_chunk,
		      uint64_t *per_segment)
{
	enum { K = 1024 };
	const struct ss_root store = {.mode = SS_ASYNC};
	struct ss_job_desc d = {.n = (uint16_t)px->net.n,
				.dtype = dtype,
				.frag_size = px->net.frag_size,
				.chunk_size = px->net.chunk_size,
				.n_eps = 1,
				.roots = async ? &store : NULL,
				.n_roots = async,
				.comp_ppm = wk_comp_ppm(px, dtype),
				.in_order = px->cfg.job.deterministic};
	size_t empty = ss_job_bytes(&d, px->net.box_txref);

	d.ep_chunks[0] = K;
	*per_chunk = (ss_job_bytes(&d, px->net.box_txref) - empty + K - 1) / K;
	d.ep_chunks[0] = 0;
	d.n_eps = (uint16_t)(px->net.n_eps < SS_MAX_EPS ? px->net.n_eps : SS_MAX_EPS);
	*per_segment = ss_job_bytes(&d, px->net.box_txref) + ss_job_align(&d) + 16 * SS_CACHE_LINE;
}

/*
 * The most chunks of this batch each unit may take into @cap (UINT32_MAX:
 * no cap), from each box endpoint's room, and @w fitted to them (lay_fit()):
 * the box takes what its memory holds, spread over the batch, and the
 * SS_GPUs the rest. 0; 1 when no box endpoint has a room (no caps); -1
 * (wk_err() says why) when the box alone must hold them ([tuning] layout =
 * ps) and cannot.
 */
static int box_caps(struct pbox *px, uint8_t dtype, bool async, uint32_t m, uint64_t *w,
		    uint32_t *cap, uint64_t *per_chunk, uint64_t *per_segment)
{
	uint64_t room = 0, need;
	bool any = false;
	uint32_t u;

	for (u = 0; u < px->net.n_eps; u++)
		any |= px->net.unit[u].room != UINT64_MAX && w[u];
	if (!any || !m)
		return 1;
	box_costs(px, dtype, async, per_chunk, per_segment);
	for (u = 0; u < px->net.n_units; u++) {
		const struct wk_unit *un = &px->net.unit[u];
		uint64_t c;

		if (u >= px->net.n_eps || un->room == UINT64_MAX) {
			cap[u] = UINT32_MAX;
			continue;
		}
		c = un->room > *per_segment ? (un->room - *per_segment) / *per_chunk : 0;
		cap[u] = c < UINT32_MAX - 1 ? (uint32_t)c : UINT32_MAX - 1;
		room += cap[u];
	}
	if (lay_fit(w, cap, px->net.n_units, m, px->cfg.tuning.layout != LAY_PS) == 0)
		return 0;
	need = (uint64_t)m * *per_chunk;
	return wk_err(PBOX_EBOX,
		      "the box has room for %" PRIu64
		      " more chunks of this job (%.1f MiB of state), "
		      "these tensors need %u (%.1f MiB) and [tuning] layout = ps puts every chunk "
		      "there: raise the box's [memory] hugepage_budget or use layout = unified",
		      room, (double)room * (double)*per_chunk / (1 << 20), m,
		      (double)need / (1 << 20)),
	       -1;
}

/* Each box endpoint's room less what this batch took there: its chunks,
 * and a segment's overhead wherever the boxes took any of it. */
static void box_charge(struct pbox *px, const uint32_t *count, const uint32_t *cap,
		       uint64_t per_chunk, uint64_t per_segment)
{
	uint32_t u, took = 0, full = 0;

	for (u = 0; u < px->net.n_eps; u++) {
		took += count[u];
		full += cap[u] != UINT32_MAX && count[u] == cap[u];
	}
	for (u = 0; took && u < px->net.n_eps; u++) {
		struct wk_unit *un = &px->net.unit[u];
		uint64_t c = (uint64_t)count[u] * per_chunk + per_segment;

		if (un->room != UINT64_MAX)
			un->room = un->room > c ? un->room - c : 0;
	}
	if (full)
		wk_log(px, CFG_LOG_INFO,
		       "layout: %u box endpoint%s full (the box's memory): the SS_GPUs sum what "
		       "did not fit",
		       full, full == 1 ? "" : "s");
}

/*
 * @added new chunks from @c0 on (those of @ts, each of @bytes) onto units:
 * the all-reduce ones and the async stores by lay_assign() over the weights
 * @w (a store's traffic is an all-reduce's: each rank sends and receives
 * its whole tensor, each summation service takes n pushes and sends n
 * answers of its share, so Theorem 1's shares balance it too), the rooted
 * ones by rooted_unit(), after the others of their unit; each chunk's mode
 * into px->net.chunk_mode; the box endpoints' rooms capping what they take
 * (box_caps()). 0, -1 when no unit has weight, -2 out of memory, -3 when
 * the box alone must take the chunks and has no room (wk_err() says so).
 */
static int assign(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, uint32_t c0,
		  uint32_t added, uint64_t *w, const uint32_t *bytes, uint32_t *unit_of,
		  uint32_t *local, uint32_t *count)
{
	uint32_t *ab = malloc((added ? added : 1) * 3 * sizeof(uint32_t)), m = 0, c, i, k,
		 *cap = malloc(px->net.n_units * sizeof(uint32_t));
	uint64_t per_chunk = 0, per_segment = 0;
	bool async = false;
	int rc = 0, caps;

	if (!ab || !cap) {
		free(ab);
		free(cap);
		return -2;
	}
	for (i = 0; i < n; i++) /* the rooted chunks' modes, set below */
		for (k = 0; k < ts[i]->n_chunks; k++)
			px->net.chunk_mode[ts[i]->chunk0 + k] =
				ts[i]->kind ? (uint32_t)ss_mode_of(ts[i]->kind) << 16 | ts[i]->root
					    : 0;
	m = 0;
	for (i = 0; i < n; i++) {
		async |= ts[i]->kind == WK_ASYNC;
		for (k = 0; k < ts[i]->n_chunks; k++)
			if (by_weight(ts[i]->kind))
				ab[m++] = bytes[ts[i]->chunk0 - c0 + k];
	}
	caps = n ? box_caps(px, ts[0]->dtype, async, m, w, cap, &per_chunk, &per_segment) : 1;
	if (caps < 0) {
		rc = -3;
		goto out;
	}
	if (lay_assign(w, caps ? NULL : cap, px->net.n_units, ab, m, ab + added, ab + 2 * added,
		       count)) {
		rc = -1;
		goto out;
	}
	if (!caps)
		box_charge(px, count, cap, per_chunk, per_segment);
	m = 0;
	for (i = 0; i < n; i++)
		for (k = 0; k < ts[i]->n_chunks; k++) {
			c = ts[i]->chunk0 - c0 + k;
			if (by_weight(ts[i]->kind)) {
				unit_of[c] = ab[added + m];
				local[c] = ab[2 * added + m++];
			} else {
				unit_of[c] = rooted_unit(px, ts[i], k);
				local[c] = count[unit_of[c]]++;
			}
		}
out:
	free(ab);
	free(cap);
	return rc;
}

int wk_layout_add(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, uint32_t *base,
		  uint32_t *count)
{
	uint64_t *w = NULL;
	uint32_t *bytes = NULL, *unit_of = NULL, *local = NULL, c, u, i, c0 = px->net.n_chunks,
		 added;
	int64_t k = chunks_for(px, ts, n, c0);
	int rc = PBOX_ENOMEM;

	if (k < 0)
		return PBOX_EINVAL;
	added = (uint32_t)k;
	w = malloc(px->net.n_units * sizeof(*w));
	bytes = malloc((added ? added : 1) * sizeof(uint32_t));
	unit_of = malloc((added ? added : 1) * sizeof(uint32_t));
	local = malloc((added ? added : 1) * sizeof(uint32_t));
	if (!w || !bytes || !unit_of || !local ||
	    grow_array(&px->net.chunk_unit, sizeof(uint32_t), c0, (size_t)c0 + added) ||
	    grow_array(&px->net.chunk_local, sizeof(uint32_t), c0, (size_t)c0 + added) ||
	    grow_array(&px->net.chunk_mode, sizeof(uint32_t), c0, (size_t)c0 + added) ||
	    grow_array(&px->net.es.frag, sizeof(*px->net.es.frag), (size_t)c0 * px->net.fpc,
		       ((size_t)c0 + added) * px->net.fpc)) {
		wk_err(rc, "out of memory for the layout of %u more chunks", added);
		goto out;
	}
	for (u = 0; u < px->net.n_units; u++)
		w[u] = px->net.unit[u].weight;
	for (i = 0; i < n; i++)
		for (c = 0; c < ts[i]->n_chunks; c++) {
			uint64_t left = ts[i]->bytes - (uint64_t)c * px->net.chunk_size;

			bytes[ts[i]->chunk0 - c0 + c] =
				(uint32_t)(left < px->net.chunk_size ? left : px->net.chunk_size);
		}
	switch (assign(px, ts, n, c0, added, w, bytes, unit_of, local, count)) {
	case -1:
		rc = wk_err(PBOX_EINVAL, "no summation service has any weight");
		goto out;
	case -2:
		wk_err(rc, "out of memory for the layout");
		goto out;
	case -3: /* box_caps() said why */
		rc = PBOX_EBOX;
		goto out;
	}
	for (u = 0; u < px->net.n_units; u++) {
		struct wk_unit *un = &px->net.unit[u];

		base[u] = un->n_chunks;
		if (grow_array(&un->global, sizeof(uint32_t), un->n_chunks,
			       (size_t)un->n_chunks + count[u])) {
			wk_err(rc, "out of memory for the layout");
			goto out;
		}
	}
	place_chunks(px, c0, added, bytes, unit_of, local, base);
	px->net.n_chunks = c0 + added;
	px->net.n_frags = px->net.n_chunks * px->net.fpc;
	for (i = 0; i < n; i++) /* ready once the boxes have their chunks too (grow.c) */
		px->net.total_bytes += ts[i]->bytes;
	px->net.es.pace_kbps = pace_kbps(px);
	rc = n ? ssgpu_add(px, ts[0]->dtype, base[px->net.self_unit], count[px->net.self_unit])
	       : PBOX_OK;
out:
	free(w);
	free(bytes);
	free(unit_of);
	free(local);
	return rc;
}
