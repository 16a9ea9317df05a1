/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the box's loss interrupted, kept for pbox_shrink() (survive.c): when
 * a job fails for its box, each host push-pull still in flight records the
 * byte ranges of its output that already hold their sum (wk_resume_capture(),
 * from the failure machine); after the shrink, the same call made again
 * takes those ranges from what the survivors agreed instead of summing
 * them again (wk_resume_apply(), from pbox_push_pull()).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_units.h"
#include "wk_resume.h"

int wk_run_add(uint64_t **run, uint32_t *n, uint32_t *cap, unsigned width, const uint64_t *v)
{
	if (*n == *cap) {
		uint32_t c = *cap ? 2 * *cap : 16;
		uint64_t *r = realloc(*run, (size_t)c * width * sizeof(**run));

		if (!r)
			return -1;
		*run = r;
		*cap = c;
	}
	memcpy(*run + (size_t)*n * width, v, width * sizeof(*v));
	(*n)++;
	return 0;
}

void wk_resume_free(struct pbox *px)
{
	for (uint32_t i = 0; i < px->n_res; i++) {
		free(px->res[i].run);
		free(px->res[i].own);
	}
	free(px->res);
	px->res = NULL;
	px->n_res = 0;
	px->res_ok = false;
	px->res_broken = WK_RS_FINE;
	px->res_pieces = 0;
}

/*
 * Every host push-pull of a laid-out tensor still in flight: the byte
 * ranges of its @out that hold their sum (the fragments delivered). After
 * the failure nothing more is written there (deliver() refuses), so this is
 * what the caller's buffer holds until pbox_shrink().
 */
void wk_resume_capture(struct pbox *px)
{
	uint32_t cap = 0;

	wk_resume_free(px);
	px->res_pieces = px->net.pieces;
	if (px->cuda) { /* its results already in GPU memory: not known here */
		px->res_broken = WK_RS_CUDA;
		return;
	}
	/* A sharded collective in flight cannot go on where it was: its pieces
	 * are new tensors in the next incarnation, and a rank that had its
	 * result would not call it again while this one would (the ranks'
	 * calls would no longer pair up). The step is redone. */
	for (uint32_t i = 0; i < px->n_t && !px->loc; i++)
		if (wk_kind_sharded(px->t[i]->kind) && px->t[i]->busy && !px->t[i]->busy->done) {
			px->res_broken = WK_RS_PIECES;
			return;
		}
	for (uint32_t i = 0; i < px->n_t && !px->loc; i++) {
		struct wk_tensor *t = px->t[i];
		struct pbox_handle *op = t->busy;
		uint32_t rcap = 0, g0 = t->chunk0 * px->net.fpc,
			 g1 = g0 + t->n_chunks * px->net.fpc;
		struct wk_resume *r;

		if (!op || op->done || !t->ready || t->key >= WK_KEY_OWN)
			continue;
		if (px->n_res == cap) {
			struct wk_resume *n = realloc(px->res, (cap ? 2 * cap : 8) * sizeof(*n));

			if (!n)
				goto nomem;
			px->res = n;
			cap = cap ? 2 * cap : 8;
		}
		r = &px->res[px->n_res++];
		*r = (struct wk_resume){.key = t->key,
					.count = t->count,
					.bytes = t->bytes,
					.dtype = t->dtype,
					.round = op->round,
					.out = op->out};
		for (uint32_t g = g0; op->parts && g < g1; g++) { /* taken: its fragments are its */
			const struct wk_frag *f = &px->net.es.frag[g];
			uint64_t ab[2];

			if (f->op != op || f->state != WK_DONE || !f->len)
				continue;
			ab[0] = wk_frag_off(px, g, t);
			ab[1] = ab[0] + f->len;
			if (r->n_run && r->run[2 * r->n_run - 1] == ab[0])
				r->run[2 * r->n_run - 1] = ab[1];
			else if (wk_run_add(&r->run, &r->n_run, &rcap, 2, ab))
				goto nomem;
		}
	}
	return;
nomem: /* then none can be resumed: pbox_shrink() says so to every rank */
	wk_resume_free(px);
	px->res_pieces = px->net.pieces;
	px->res_broken = WK_RS_NOMEM;
}

int wk_resume_apply(struct pbox *px, uint64_t key, uint64_t count, int dtype, const void **in,
		    void *out)
{
	struct wk_resume r;
	const uint8_t *src;
	uint8_t *dst = out;
	uint64_t x = 0;
	uint32_t i;

	pthread_mutex_lock(&px->mu);
	for (i = 0; px->res_ok && i < px->n_res && px->res[i].key != key; i++)
		;
	if (!px->res_ok || i == px->n_res) {
		pthread_mutex_unlock(&px->mu);
		return PBOX_OK;
	}
	r = px->res[i];
	if (r.count != count || r.dtype != dtype) {
		pthread_mutex_unlock(&px->mu);
		return wk_err(PBOX_EINVAL,
			      "pbox_push_pull: key %" PRIu64 ": %" PRIu64
			      " elements of %s, but the "
			      "push-pull the box's loss interrupted had %" PRIu64 " of %s",
			      key, count, sum_dtype_name((enum sum_dtype)dtype), r.count,
			      sum_dtype_name((enum sum_dtype)r.dtype));
	}
	if (r.out != out) {
		pthread_mutex_unlock(&px->mu);
		return wk_err(PBOX_EINVAL,
			      "pbox_push_pull: key %" PRIu64
			      " resumes the push-pull the box's loss "
			      "interrupted: its sums so far are in its @out (%p), not in %p",
			      key, (void *)r.out, out);
	}
	px->res[i] = px->res[--px->n_res];
	pthread_mutex_unlock(&px->mu);
	src = *in;
	for (uint32_t j = 0; j <= r.n_own; j++) {
		uint64_t a = j < r.n_own ? r.own[3 * j] : r.bytes;

		if (src != dst && a > x) /* a sum nowhere: our input again */
			memmove(dst + x, src + x, a - x);
		if (j == r.n_own)
			break;
		if (r.own[3 * j + 2] != px->net.rank) /* its owner gives the sum, we nothing */
			memset(dst + a, 0, r.own[3 * j + 1] - a);
		x = r.own[3 * j + 1];
	}
	free(r.run);
	free(r.own);
	*in = out;
	return PBOX_OK;
}
