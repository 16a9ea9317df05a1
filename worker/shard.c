/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The sharded collectives (FSDP's and ZeRO's traffic): reduce-scatter,
 * all-gather and broadcast, on the wire and the SS the push-pulls use.
 *
 * Each shard of a reduce-scatter or an all-gather is a tensor of its own,
 * rooted at the rank that owns the shard (WIRE.md's rooted chunks): a
 * reduce-scatter's shard r is summed at rank r's SS_GPU, every rank
 * pushing its part and only rank r receiving the sum; an all-gather's shard
 * r starts at rank r's SS_GPU and goes to every other rank. Each rank's
 * link then carries (n - 1)/n of the tensor each way, which is the bound:
 * no placement, box or not, does better (docs/workers.md derives it). A
 * broadcast is one tensor spread over the other ranks' SS_GPUs: the root
 * sends each byte once, the others fan it out.
 *
 * The pieces' keys are libpbox's own (from 2^63), derived from the
 * caller's key, the collective, the dtype, the world size, the shard and
 * its count,
 * so a job that shrank or re-sharded uses new pieces. One handle covers
 * the pieces (pbox_wait(), pbox_test()). Host memory.
 *
 * With local aggregation each shard is a tensor of the machine's: its
 * ranks meet in shared memory (a reduce's parts summed there, a gather's
 * root's data put there) and the leader pushes the shard's pieces rooted at
 * the root rank's machine, so the network carries each shard once per
 * machine, as the bound with n = machines wants; the machine's ranks that
 * take the result copy it out of the leader's region.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sum.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_submit.h"
#include "wk_ranks.h"
#include "wk_local.h"
#include "wk_shard.h"

/* A piece's key: a mix of what names it (splitmix64's finalizer per word). */
static uint64_t piece_key(uint64_t key, uint8_t kind, enum pbox_dtype dtype, uint32_t n, uint32_t s,
			  uint64_t count)
{
	const uint64_t w[4] = {key, (uint64_t)kind << 40 | (uint64_t)dtype << 32 | n, s, count};
	uint64_t x = 0x7368617264656421ull; /* "sharded!" */

	for (unsigned i = 0; i < 4; i++)
		x = wk_mix_in(x, w[i]);
	return WK_KEY_OWN | (x >> 1);
}

/* What every sharded collective checks first: PBOX_OK, or the error. */
static int check(struct pbox *px, const char *fn, uint64_t key, enum pbox_dtype dtype,
		 struct pbox_handle **opp)
{
	if (!px || !opp)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": a NULL argument", fn, key);
	*opp = NULL;
	if (key >= WK_KEY_OWN)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": keys from 2^63 up are libpbox's own", fn, key);
	if ((unsigned)dtype >= SUM_DTYPE_COUNT)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": unknown dtype %d", fn, key,
			      (int)dtype);
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": before pbox_start()", fn, key);
	return PBOX_OK;
}

/* A group handle for @n pieces; NULL out of memory (said). */
static struct pbox_handle *group(struct pbox *px, const char *fn, uint32_t n)
{
	struct pbox_handle *g = calloc(1, sizeof(*g));

	if (g)
		g->kids = calloc(n ? n : 1, sizeof(*g->kids));
	if (!g || !g->kids) {
		free(g);
		wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
		return NULL;
	}
	g->px = px;
	return g;
}

/* @rc from submitting a piece: a failure ends the group (the pieces
 * already submitted are waited for, their results dropped). */
static int end_group(struct pbox_handle *g, int rc, struct pbox_handle **opp)
{
	char msg[WK_ERR_LEN];

	if (rc == PBOX_OK) {
		*opp = g;
		return PBOX_OK;
	}
	snprintf(msg, sizeof(msg), "%s", pbox_last_error());
	pbox_wait(g);
	return wk_err(rc, "%s", msg);
}

/* Shard @s (@c elements of @kind, rooted at world rank @s, or the root of
 * a broadcast) submitted: to the network job (@net: its ranks, a leader's
 * machines), or with local aggregation as a tensor of the machine's, whose
 * leader pushes it rooted at @s's machine (local_lead.c). */
static int piece(struct pbox *px, const char *fn, uint64_t key, const void *in, void *out,
		 uint64_t c, enum pbox_dtype dtype, uint8_t kind, uint32_t s, uint64_t grp,
		 bool net, struct pbox_handle **opp)
{
	const struct wk_lcoll lc = {.fn = fn, .kind = kind, .root = s, .grp = grp};
	const uint64_t k = piece_key(key, kind, dtype, net ? px->net.n : wk_world_n(px), s, c);

	if (px->loc && !net)
		return wk_local_collective(px, &lc, k, in, out, c, dtype, false, NULL, opp);
	return wk_collective(px, fn, k, in, out, c, dtype, kind, s, grp, opp);
}

/* A reduce-scatter's or an all-gather's pieces: shard s (counts[s]
 * elements at offset sum(counts[0..s-1]) of the whole) rooted at rank s. */
static int sharded(struct pbox *px, const char *fn, uint64_t key, const uint8_t *in, uint8_t *out,
		   const uint64_t *counts, enum pbox_dtype dtype, uint8_t kind, bool net,
		   struct pbox_handle **opp)
{
	const size_t esz = sum_dtype_size((enum sum_dtype)dtype);
	const uint32_t n = net ? px->net.n : wk_world_n(px),
		       me = net ? px->net.rank : wk_world_rank(px);
	/* the pieces' collective: they go out interleaved, chunk by chunk */
	const uint64_t grp = piece_key(key, kind, dtype, n, UINT32_MAX, 0);
	struct pbox_handle *g;
	uint64_t off = 0;
	int rc = PBOX_OK;

	if (!counts)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": counts is NULL", fn, key);
	if ((kind == WK_REDUCE ? !in : !out) || (counts[me] && (kind == WK_REDUCE ? !out : !in)))
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": a NULL buffer", fn, key);
	if (!(g = group(px, fn, n)))
		return PBOX_ENOMEM;
	for (uint32_t s = 0; s < n && rc == PBOX_OK; s++) {
		const uint64_t c = counts[s], at = off * esz;
		const void *pin = kind == WK_REDUCE ? in + at : s == me ? in : NULL;
		void *pout = kind == WK_REDUCE ? (s == me ? out : NULL) : out + at;

		off += c;
		if (!c)
			continue;
		if (kind == WK_GATHER && s == me) /* its own shard: it has it */
			memmove(pout, in, c * esz);
		rc = piece(px, fn, key, pin, pout, c, dtype, kind, s, grp, net,
			   &g->kids[g->n_kids]);
		g->n_kids += rc == PBOX_OK;
	}
	return end_group(g, rc, opp);
}

int pbox_reduce_scatter(struct pbox *px, uint64_t key, const void *in, void *out,
			const uint64_t *counts, enum pbox_dtype dtype, struct pbox_handle **opp)
{
	int rc = check(px, "pbox_reduce_scatter", key, dtype, opp);

	return rc ? rc
		  : sharded(px, "pbox_reduce_scatter", key, in, out, counts, dtype, WK_REDUCE,
			    false, opp);
}

int pbox_all_gather(struct pbox *px, uint64_t key, const void *in, void *out,
		    const uint64_t *counts, enum pbox_dtype dtype, struct pbox_handle **opp)
{
	int rc = check(px, "pbox_all_gather", key, dtype, opp);

	return rc ? rc
		  : sharded(px, "pbox_all_gather", key, in, out, counts, dtype, WK_GATHER, false,
			    opp);
}

int pbox_broadcast(struct pbox *px, uint64_t key, void *buf, uint64_t count, enum pbox_dtype dtype,
		   uint32_t root, struct pbox_handle **opp)
{
	int rc = check(px, "pbox_broadcast", key, dtype, opp);
	struct pbox_handle *g;

	if (rc)
		return rc;
	if (!buf)
		return wk_err(PBOX_EINVAL, "pbox_broadcast: key %" PRIu64 ": buf is NULL", key);
	if (root >= wk_world_n(px))
		return wk_err(PBOX_EINVAL,
			      "pbox_broadcast: key %" PRIu64 ": root %u, in a world of %u", key,
			      root, wk_world_n(px));
	if (!(g = group(px, "pbox_broadcast", 1)))
		return PBOX_ENOMEM;
	rc = piece(px, "pbox_broadcast", key, root == wk_world_rank(px) ? buf : NULL,
		   root == wk_world_rank(px) ? NULL : buf, count, dtype, WK_BCAST, root, 0, false,
		   &g->kids[0]);
	g->n_kids = rc == PBOX_OK;
	return end_group(g, rc, opp);
}

int wk_all_gather_net(struct pbox *px, const char *fn, uint64_t key, const void *in, void *out,
		      const uint64_t *counts, enum pbox_dtype dtype, struct pbox_handle **opp)
{
	*opp = NULL;
	return sharded(px, fn, key, in, out, counts, dtype, WK_GATHER, true, opp);
}
