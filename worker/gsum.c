/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Compressed tensors summed by all-gather (ByteComp's third option, for
 * schemes whose sums must not be compressed again): a tensor set to
 * "SCHEME:gather" (pbox_set_compression()) is not summed by a summation
 * service. Each rank compresses it with its error feedback, block by block
 * (the blocks are the wire's fragments, so the bytes are those its push
 * would carry), the ranks all-gather the compressed tensors (the pieces of
 * pbox_all_gather(), each rank's sent from its own SS_GPU), and each rank
 * decompresses every rank's tensor and adds them up in rank order: one sum,
 * the same bits on every rank, holding each rank's k largest (top-k) or
 * signs (sign) where a summation service would compress the sum again and
 * keep only its own k largest or signs.
 *
 * The link carries n - 1 compressed tensors in where a push-pull carries
 * one: worth it where the compressed tensor is small against the whole
 * (top-k at 1%: 8 bytes an element sent, 4% of the tensor a rank at n =
 * 4). The compression runs in the caller's thread inside pbox_push_pull(),
 * the sum of the gathered tensors in pbox_wait() or the pbox_test() that
 * completes the handle.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comp.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_submit.h"
#include "wk_pbox.h"
#include "wk_shard.h"

/* A push-pull of a gathered tensor, from its start to its sum. */
struct gsum {
	struct pbox *px;
	uint64_t key, count;
	float *out;
	struct comp_spec c;
	uint32_t n, blk;     /* ranks; elements per block (a fragment's) */
	size_t stride;	     /* a rank's compressed tensor, padded to whole words */
	uint8_t *mine, *all; /* ours; every rank's, rank by rank */
	float *tmp;	     /* one block, decompressed */
	void *scratch;	     /* comp_scratch_bytes(blk) */
};

/* Block @b's elements of a tensor of @count in blocks of @blk. */
static size_t block_len(uint64_t count, uint32_t blk, uint64_t b)
{
	uint64_t left = count - b * blk;

	return left < blk ? (size_t)left : blk;
}

/* The compressed tensor's bytes: every block's payload, one after another. */
static size_t packed_bytes(const struct comp_spec *c, uint64_t count, uint32_t blk)
{
	size_t bytes = 0;

	for (uint64_t b = 0; b * blk < count; b++)
		bytes += comp_bytes(c, block_len(count, blk, b));
	return bytes;
}

static void gsum_free(struct gsum *gs)
{
	if (!gs)
		return;
	free(gs->mine);
	free(gs->all);
	free(gs->tmp);
	free(gs->scratch);
	free(gs);
}

/* Rank @r's compressed tensor, block by block, into @out: checked first
 * (a peer's bytes are validated before any of them is used), then
 * decompressed and added (rank 0's stored). PBOX_OK or PBOX_EPEER. */
static int add_rank(struct gsum *gs, uint32_t r)
{
	const uint8_t *p = gs->all + (size_t)r * gs->stride;

	for (uint64_t b = 0; b * gs->blk < gs->count; b++) {
		const size_t len = block_len(gs->count, gs->blk, b),
			     bytes = comp_bytes(&gs->c, len);
		const char *why = comp_payload_check(&gs->c, p, bytes, len);
		float *o = gs->out + b * gs->blk;

		if (why)
			return wk_err(PBOX_EPEER,
				      "pbox_push_pull: key %" PRIu64 " (%s:gather): rank %u's "
				      "compressed block %" PRIu64 " is malformed: %s",
				      gs->key, comp_scheme_name(gs->c.scheme), r, b, why);
		comp_decode(&gs->c, r ? gs->tmp : o, p, len, 0, gs->scratch);
		for (size_t i = 0; r && i < len; i++)
			o[i] += gs->tmp[i];
		p += bytes;
	}
	return PBOX_OK;
}

/* The handle's finish (handle.c): every rank's tensor decompressed and
 * summed in rank order into the caller's output, once the all-gather
 * completed; the tensor free for its next push-pull either way. */
static int gsum_finish(void *arg, int status)
{
	struct gsum *gs = arg;
	struct wk_tensor *t;
	int rc = status;

	for (uint32_t r = 0; rc == PBOX_OK && r < gs->n; r++)
		rc = add_rank(gs, r);
	pthread_mutex_lock(&gs->px->mu);
	t = wk_find_tensor(gs->px, gs->key);
	if (t)
		t->gsum_busy = false;
	pthread_mutex_unlock(&gs->px->mu);
	gsum_free(gs);
	return rc;
}

/* A new gsum for a push-pull of @count elements into @out under @c; NULL
 * out of memory. */
static struct gsum *gsum_new(struct pbox *px, uint64_t key, void *out, uint64_t count,
			     const struct comp_spec *c)
{
	struct gsum *gs = calloc(1, sizeof(*gs));

	if (!gs)
		return NULL;
	*gs = (struct gsum){.px = px,
			    .key = key,
			    .count = count,
			    .out = out,
			    .c = *c,
			    .n = px->net.n,
			    .blk = px->net.frag_size / 4u};
	gs->stride = (packed_bytes(c, count, gs->blk) + 3) & ~(size_t)3;
	gs->mine = calloc(1, gs->stride); /* its padding zero: it travels */
	gs->all = malloc(gs->stride * gs->n);
	gs->tmp = malloc((size_t)gs->blk * sizeof(float));
	gs->scratch = malloc((comp_scratch_bytes(gs->blk) + 7) & ~(size_t)7);
	if (!gs->mine || !gs->all || !gs->tmp || !gs->scratch) {
		gsum_free(gs);
		return NULL;
	}
	return gs;
}

/* Whether @key's push-pull is summed by all-gather: if so *@tp is its
 * tensor, marked busy, and *@c says how it is compressed. PBOX_OK with
 * *@tp NULL: a push-pull like any other. */
static int gathered(struct pbox *px, uint64_t key, uint64_t count, enum pbox_dtype dtype,
		    struct comp_spec *c, struct wk_tensor **tp)
{
	struct wk_tensor *t;
	int rc = PBOX_OK;

	*tp = NULL;
	if (!px || px->loc || px->phase != WK_PH_STARTED)
		return PBOX_OK;
	pthread_mutex_lock(&px->mu);
	t = wk_find_tensor(px, key);
	if (t && t->gather && t->resid) {
		if (count != t->count || dtype != PBOX_FP32)
			rc = wk_err(PBOX_EINVAL,
				    "pbox_push_pull: key %" PRIu64 " is %" PRIu64
				    " elements of fp32, not %" PRIu64 " of %s",
				    key, t->count, count, sum_dtype_name((enum sum_dtype)dtype));
		else if (t->gsum_busy || t->busy)
			rc = wk_err(PBOX_ESTATE,
				    "pbox_push_pull: key %" PRIu64 ": its push-pull is in flight",
				    key);
		else {
			*c = (struct comp_spec){t->comp, px->cfg.job.compression_ppm};
			t->gsum_busy = true;
			t->held = true; /* a push-pull as it is, later, sends the residual */
			*tp = t;
		}
	}
	pthread_mutex_unlock(&px->mu);
	return rc;
}

/* The all-gather's key: derived from the tensor's, below 2^63. */
static uint64_t gather_key(uint64_t key)
{
	return wk_mix64(key ^ 0x6761746865722121ull /* "gather!!" */) >> 1;
}

/* A gathered push-pull of tensor @t (marked busy): compressed here, the
 * all-gather started, the sum left to the handle's finish. */
static int gsum_start(struct pbox *px, struct wk_tensor *t, const float *in, void *out,
		      const struct comp_spec *c, struct pbox_handle **opp)
{
	struct gsum *gs = gsum_new(px, t->key, out, t->count, c);
	uint64_t *counts = gs ? malloc(gs->n * sizeof(*counts)) : NULL;
	uint8_t *w;
	int rc;

	if (!gs || !counts) {
		free(counts);
		gsum_free(gs);
		pthread_mutex_lock(&px->mu);
		t->gsum_busy = false;
		pthread_mutex_unlock(&px->mu);
		return wk_err(PBOX_ENOMEM, "pbox_push_pull: key %" PRIu64 ": out of memory",
			      t->key);
	}
	w = gs->mine;
	for (uint64_t b = 0; b * gs->blk < gs->count; b++) {
		const size_t len = block_len(gs->count, gs->blk, b);

		comp_encode(c, in + b * gs->blk, t->resid + b * gs->blk, len, w, 0, gs->scratch);
		w += comp_bytes(c, len);
	}
	for (uint32_t r = 0; r < gs->n; r++)
		counts[r] = gs->stride / 4;
	/* with local aggregation, a leader's piece: among the machines' leaders */
	rc = px->loc ? wk_all_gather_net(px, "pbox_push_pull", gather_key(t->key), gs->mine,
					 gs->all, counts, PBOX_FP32, opp)
		     : pbox_all_gather(px, gather_key(t->key), gs->mine, gs->all, counts, PBOX_FP32,
				       opp);
	free(counts);
	if (rc != PBOX_OK) {
		gs->n = 0;
		gsum_finish(gs, rc);
		return rc;
	}
	(*opp)->finish = gsum_finish;
	(*opp)->finish_arg = gs;
	return PBOX_OK;
}

/* Local aggregation's leader (local_lead.c, through px->gsum_net): piece
 * @t of a machine's tensor, gathered among the machines' leaders, its
 * machine's sum in @in compressed with the piece's error feedback; the
 * sum of every machine's into @out when the handle completes. PBOX_OK,
 * PBOX_EAGAIN (not gathered: push-pull it), or the error. */
static int gsum_net(struct pbox *px, struct wk_tensor *t, const void *in, void *out,
		    struct pbox_handle **opp)
{
	struct comp_spec c;

	pthread_mutex_lock(&px->mu);
	if (!t->gather || !t->resid || !t->comp || t->gsum_busy || t->busy) {
		pthread_mutex_unlock(&px->mu);
		return PBOX_EAGAIN;
	}
	c = (struct comp_spec){t->comp, px->cfg.job.compression_ppm};
	t->gsum_busy = true;
	t->held = true;
	pthread_mutex_unlock(&px->mu);
	return gsum_start(px, t, in, out, &c, opp);
}

int pbox_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		   enum pbox_dtype dtype, struct pbox_handle **opp)
{
	struct wk_tensor *t = NULL;
	struct comp_spec c;
	int rc = wk_own_key("pbox_push_pull", key);

	if (opp)
		*opp = NULL;
	if (px && px->loc && !px->gsum_net) { /* before the leader's thread takes any */
		pthread_mutex_lock(&px->mu);
		px->gsum_net = gsum_net;
		pthread_mutex_unlock(&px->mu);
	}
	if (rc == PBOX_OK && in && out && opp)
		rc = gathered(px, key, count, dtype, &c, &t);
	if (rc)
		return rc;
	return t ? gsum_start(px, t, in, out, &c, opp)
		 : wk_submit(px, key, in, out, count, dtype, opp);
}

int pbox_allreduce(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		   enum pbox_dtype dtype)
{
	struct pbox_handle *op;
	int rc = pbox_push_pull(px, key, in, out, count, dtype, &op);

	return rc ? rc : pbox_wait(op);
}
