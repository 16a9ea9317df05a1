/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU memory for the calls that take whole buffers (libpbox 3.12): the
 * sharded collectives and the asynchronous stores. A call's input is
 * copied from the GPU to a pinned host buffer of its key, on the CUDA
 * module's own stream after the work queued on the caller's (the module's
 * mark(), copy(), done()); the host call (shard.c, async.c) runs on that
 * buffer; its result is copied back, and the caller's handle completes
 * once it is in GPU memory. A thread of this file's own, started by the
 * first such call, moves each call from step to step: it polls the
 * module's events and the host handle, so the caller waits on the host
 * for nothing.
 *
 * The ranks agree on a tensor first used after the start in the order
 * each rank submits it, and compare each one's place in the order of
 * collectives (grow.c). A call whose host collective may meet a new tensor
 * (the key's first call in this incarnation, or its first with these
 * counts, dtype or root) is therefore copied and submitted on the caller's
 * thread, which waits for the copy: its place is the program's on every
 * rank. The stager submits the rest, whose tensors every rank knows, and
 * they take no place in the order (submit.c, wk_on_stage()).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/stage.h"
#include "sum.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_submit.h"
#include "wk_ranks.h"
#include "wk_cstage.h"

enum cs_kind { CS_REDUCE, CS_GATHER, CS_BCAST, CS_ASYNC };
enum cs_step { CS_IN, CS_HOST, CS_OUT, CS_DONE };

static const char *const cs_fn[] = {"pbox_reduce_scatter_cuda", "pbox_all_gather_cuda",
				    "pbox_broadcast_cuda", "pbox_push_pull_async_cuda"};

/* A key's pinned host buffer: kept from one call to the next. */
struct cs_buf {
	struct cs_buf *next;
	uint64_t key;
	uint8_t kind;
	bool busy; /* a call in flight holds it (under the stager's mu) */
	bool pinned;
	uint32_t epoch; /* 1 + the incarnation of the last call submitted on the caller's thread */
	uint64_t sig;	/* and that call's shape */
	uint8_t *p;
	uint64_t cap;
};

/* One call on its way: the input to the host, the host call, the result
 * back to the GPU. */
struct cs_call {
	struct cs_call *next;
	enum cs_kind kind;
	enum cs_step step;
	uint64_t key, count; /* count: the broadcast's and the store's */
	enum pbox_dtype dtype;
	uint32_t root, n;
	const uint64_t *counts; /* the sharded ones': a copy, after this struct */
	const void *din;
	void *dout;
	struct cs_buf *b;
	uint64_t in_off, in_bytes, out_off, out_bytes, need, sig;
	struct pbox_handle *op, *host;
	void *mark, *ev; /* the caller's stream where it called; the copy's event */
};

struct wk_cstage {
	struct pbox *px;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	struct cs_call *inq;  /* handed to the thread, under mu */
	struct cs_buf *bufs;  /* under mu */
	struct cs_call *mine; /* the thread's own */
};

static void nap(void)
{
	const struct timespec ts = {0, 20000};

	nanosleep(&ts, NULL);
}

static uint64_t up64(uint64_t v)
{
	return (v + 63) & ~63ull;
}

/* Where a sharded call's input and result lie in the host buffer. */
static int shape_sharded(struct pbox *px, struct cs_call *c, size_t esz)
{
	const uint32_t me = wk_world_rank(px);
	uint64_t total = 0, before = 0;

	for (uint32_t s = 0; s < c->n; s++) {
		if (c->counts[s] > (1ull << 48) || total + c->counts[s] > (1ull << 48))
			return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": counts too large",
				      cs_fn[c->kind], c->key);
		before += s < me ? c->counts[s] : 0;
		total += c->counts[s];
		c->sig = wk_mix_in(c->sig, c->counts[s]);
	}
	if (c->kind == CS_REDUCE) { /* the whole in, this rank's shard of the sum after it */
		c->in_bytes = total * esz;
		c->out_off = up64(c->in_bytes);
		c->out_bytes = c->counts[me] * esz;
		c->need = c->out_off + c->out_bytes;
	} else { /* every shard, this rank's copied into its place */
		c->out_bytes = c->need = total * esz;
		c->in_off = before * esz;
		c->in_bytes = c->counts[me] * esz;
	}
	if ((c->kind == CS_REDUCE ? !c->din : !c->dout) ||
	    (c->counts[me] && (c->kind == CS_REDUCE ? !c->dout : !c->din)))
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": a NULL buffer", cs_fn[c->kind],
			      c->key);
	return PBOX_OK;
}

/* What the host call checks first, here before anything is copied, and
 * the call's shape: PBOX_OK, or the error. */
static int shape(struct pbox *px, struct cs_call *c)
{
	const char *fn = cs_fn[c->kind];
	size_t esz;

	if (c->key >= WK_KEY_OWN)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": keys from 2^63 up are libpbox's own", fn,
			      c->key);
	if ((unsigned)c->dtype >= SUM_DTYPE_COUNT)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": unknown dtype %d", fn, c->key,
			      (int)c->dtype);
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": before pbox_start()", fn, c->key);
	if (px->loc && c->kind == CS_ASYNC)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": not with local aggregation ([worker] "
			      "local_aggregation = off)",
			      fn, c->key);
	esz = sum_dtype_size((enum sum_dtype)c->dtype);
	c->sig = wk_mix_in(wk_mix_in(wk_mix_in(c->kind, c->dtype), c->root), c->count);
	if (c->kind == CS_REDUCE || c->kind == CS_GATHER)
		return shape_sharded(px, c, esz);
	if (c->count > (1ull << 48))
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": count too large", fn, c->key);
	if (c->kind == CS_BCAST) { /* in place: the root's goes out, the others' comes in */
		if (c->root >= wk_world_n(px))
			return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": root %u, in a world of %u",
				      fn, c->key, c->root, wk_world_n(px));
		c->need = c->count * esz;
		c->in_bytes = c->root == wk_world_rank(px) ? c->need : 0;
		c->out_bytes = c->need - c->in_bytes;
	} else {
		c->in_bytes = c->out_bytes = c->count * esz;
		c->out_off = up64(c->in_bytes);
		c->need = c->out_off + c->out_bytes;
	}
	return PBOX_OK;
}

/* The CUDA module's checks of the device buffers, one at a time. */
static int check_dev(struct pbox *px, const struct cs_call *c)
{
	const size_t esz = sum_dtype_size((enum sum_dtype)c->dtype);
	const void *p[2] = {c->din, c->dout};
	const uint64_t bytes[2] = {c->in_bytes, c->out_bytes};
	int rc = PBOX_OK;

	for (int k = 0; k < 2 && rc == PBOX_OK; k++)
		if (bytes[k])
			rc = px->cuda_ops->check(px->cuda, cs_fn[c->kind], c->key, p[k],
						 (void *)(uintptr_t)p[k], bytes[k] / esz, c->dtype);
	return rc;
}

/* The host call on the staged buffer. */
static int submit(struct pbox *px, struct cs_call *c)
{
	uint8_t *p = c->b->p;

	switch (c->kind) {
	case CS_REDUCE:
		return pbox_reduce_scatter(px, c->key, p, p + c->out_off, c->counts, c->dtype,
					   &c->host);
	case CS_GATHER:
		return pbox_all_gather(px, c->key, p + c->in_off, p, c->counts, c->dtype, &c->host);
	case CS_BCAST:
		return pbox_broadcast(px, c->key, p, c->count, c->dtype, c->root, &c->host);
	default:
		return pbox_push_pull_async(px, c->key, p, p + c->out_off, c->count, c->dtype,
					    &c->host);
	}
}

static void give_buf(struct pbox *px, struct cs_buf *b)
{
	pthread_mutex_lock(&px->cst->mu);
	b->busy = false;
	pthread_mutex_unlock(&px->cst->mu);
}

/* A call's host buffer, held for it (one call per key at a time): PBOX_OK,
 * or the error. *@fresh: the host call may meet a new tensor. */
static int take_buf(struct pbox *px, struct cs_call *c, bool *fresh)
{
	struct wk_cstage *cs = px->cst;
	struct cs_buf *b;
	int rc = PBOX_OK;

	pthread_mutex_lock(&cs->mu);
	for (b = cs->bufs; b && !(b->key == c->key && b->kind == c->kind); b = b->next)
		;
	if (b && b->busy) {
		rc = wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": its last call is still in flight",
			    cs_fn[c->kind], c->key);
	} else if (!b && (b = calloc(1, sizeof(*b)))) {
		b->key = c->key;
		b->kind = (uint8_t)c->kind;
		b->next = cs->bufs;
		cs->bufs = b;
	}
	if (b && rc == PBOX_OK)
		b->busy = true;
	pthread_mutex_unlock(&cs->mu);
	if (rc || !b)
		return rc ? rc : wk_err(PBOX_ENOMEM, "%s: out of memory", cs_fn[c->kind]);
	c->b = b;
	if (b->cap < c->need) { /* its own now: grown outside the lock */
		if (b->pinned)
			px->cuda_ops->host_unpin(px->cuda, b->p);
		free(b->p);
		b->cap = (c->need + 4095) & ~4095ull;
		b->p = aligned_alloc(4096, b->cap ? b->cap : 4096);
		/* not pinned: the copies still land, more slowly */
		b->pinned = b->p && px->cuda_ops->host_pin(px->cuda, b->p, b->cap) == PBOX_OK;
		if (!b->p) {
			b->cap = 0;
			give_buf(px, b);
			return wk_err(PBOX_ENOMEM,
				      "%s: key %" PRIu64 ": out of memory for %" PRIu64
				      " bytes of host buffer",
				      cs_fn[c->kind], c->key, c->need);
		}
	}
	*fresh = b->epoch != px->epoch + 1 || b->sig != c->sig;
	return PBOX_OK;
}

/* @c's copy's event and the caller's mark, where it still holds them:
 * waited for and freed. */
static void drop_events(struct pbox *px, struct cs_call *c)
{
	if (c->ev)
		px->cuda_ops->drop(px->cuda, c->ev);
	if (c->mark)
		px->cuda_ops->drop(px->cuda, c->mark);
	c->ev = c->mark = NULL;
}

/* The input on its way to the host: PBOX_EAGAIN while it is; PBOX_OK once
 * it landed and the host call is submitted; or the error. */
static int step_in(struct pbox *px, struct cs_call *c)
{
	const struct wk_cuda_ops *o = px->cuda_ops;
	int r;

	if (c->ev) {
		r = o->done(px->cuda, c->ev);
		if (r == 0)
			return PBOX_EAGAIN;
		c->ev = NULL;
		if (r < 0) { /* the copy failed: the mark is of no more use */
			drop_events(px, c);
			return r;
		}
	}
	r = o->done(px->cuda, c->mark); /* reached already where a copy came after it */
	if (r == 0)
		return PBOX_EAGAIN;
	c->mark = NULL;
	if (r < 0)
		return r;
	r = submit(px, c);
	if (r == PBOX_OK)
		c->step = CS_HOST;
	return r;
}

/* The host call's result: PBOX_EAGAIN while it is in flight; PBOX_OK once
 * its copy to the GPU is queued (CS_OUT), or there is none to make
 * (CS_DONE); or the error. */
static int step_host(struct pbox *px, struct cs_call *c)
{
	int r = pbox_test(c->host);

	if (r == PBOX_EAGAIN)
		return r;
	c->host = NULL;
	if (r == PBOX_OK && !c->out_bytes)
		c->step = CS_DONE;
	if (r != PBOX_OK || !c->out_bytes)
		return r;
	r = px->cuda_ops->copy(px->cuda, c->dout, c->b->p + c->out_off, c->out_bytes, NULL, &c->ev);
	if (r == PBOX_OK)
		c->step = CS_OUT;
	return r;
}

/* The caller's handle completes with @status (@msg); the call is freed. */
static void finish(struct pbox *px, struct cs_call *c, int status, const char *msg)
{
	struct pbox_handle *op = c->op;

	give_buf(px, c->b);
	pthread_mutex_lock(&px->mu);
	op->status = status;
	if (status != PBOX_OK)
		snprintf(op->msg, sizeof(op->msg), "%s: key %" PRIu64 ": %s", cs_fn[c->kind],
			 c->key, msg);
	op->done = true;
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
	free(c);
}

/* One step of @c, on the stager's thread: whether it moved, and *@gone
 * once it is finished (freed). */
static bool step(struct pbox *px, struct cs_call *c, bool *gone)
{
	int r;

	*gone = false;
	if (c->step == CS_IN) {
		r = step_in(px, c);
	} else if (c->step == CS_HOST) {
		r = step_host(px, c);
	} else {
		r = px->cuda_ops->done(px->cuda, c->ev);
		r = r == 0 ? PBOX_EAGAIN : r == 1 ? PBOX_OK : r;
		if (r != PBOX_EAGAIN) {
			c->ev = NULL;
			c->step = CS_DONE;
		}
	}
	if (r == PBOX_EAGAIN)
		return false;
	if (r != PBOX_OK || c->step == CS_DONE) {
		finish(px, c, r, r != PBOX_OK ? pbox_last_error() : NULL);
		*gone = true;
	}
	return true;
}

/* The calls still on their way at pbox_finalize() (after the engine):
 * their copies waited for, their handles failed; the buffers freed. */
static void drain(struct wk_cstage *cs)
{
	struct pbox *px = cs->px;

	while (cs->mine) {
		struct cs_call *c = cs->mine;

		cs->mine = c->next;
		drop_events(px, c);
		/* c->host: its engine is gone, nothing writes to the buffer */
		finish(px, c, PBOX_EFAILED, "pbox_finalize() while it was in flight");
	}
	while (cs->bufs) {
		struct cs_buf *b = cs->bufs;

		cs->bufs = b->next;
		if (b->pinned)
			px->cuda_ops->host_unpin(px->cuda, b->p);
		free(b->p);
		free(b);
	}
}

static void *cs_main(void *arg)
{
	struct wk_cstage *cs = arg;
	bool stop = false;

	pthread_setname_np(pthread_self(), "pbox-cstage");
	wk_mark_stage_thread();
	while (!stop) {
		bool moved = false, gone;

		pthread_mutex_lock(&cs->mu);
		while (!cs->stop && !cs->inq && !cs->mine)
			pthread_cond_wait(&cs->cv, &cs->mu);
		for (struct cs_call *c; (c = cs->inq);
		     cs->mine = c) { /* any order: known tensors */
			cs->inq = c->next;
			c->next = cs->mine;
		}
		stop = cs->stop;
		pthread_mutex_unlock(&cs->mu);
		for (struct cs_call **pp = &cs->mine; *pp && !stop;) {
			struct cs_call *c = *pp, *next = c->next;

			moved |= step(cs->px, c, &gone);
			if (gone)
				*pp = next;
			else
				pp = &c->next;
		}
		if (!moved && !stop)
			nap();
	}
	drain(cs);
	return NULL;
}

static void cs_stop(struct pbox *px)
{
	struct wk_cstage *cs = px->cst;

	pthread_mutex_lock(&cs->mu);
	cs->stop = true;
	pthread_cond_broadcast(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
	pthread_join(cs->thr, NULL);
	pthread_cond_destroy(&cs->cv);
	pthread_mutex_destroy(&cs->mu);
	free(cs);
	px->cst = NULL;
}

/* The CUDA module, and the stager's thread, started once. */
static int cs_open(struct pbox *px, const char *fn)
{
	struct wk_cstage *cs;
	int rc = wk_cuda_load(px, fn);

	if (rc)
		return rc;
	pthread_mutex_lock(&px->cuda_mu);
	if (!px->cst && (cs = calloc(1, sizeof(*cs)))) {
		cs->px = px;
		pthread_mutex_init(&cs->mu, NULL);
		pthread_cond_init(&cs->cv, NULL);
		if (pthread_create(&cs->thr, NULL, cs_main, cs) == 0) {
			px->cst = cs;
			px->cst_stop = cs_stop;
		} else {
			pthread_cond_destroy(&cs->cv);
			pthread_mutex_destroy(&cs->mu);
			free(cs);
		}
	}
	rc = px->cst ? PBOX_OK : wk_err(PBOX_ENOMEM, "%s: no thread for its copies", fn);
	pthread_mutex_unlock(&px->cuda_mu);
	return rc;
}

/* A staged call's handle: answered once (pbox_test(), pbox_wait()). */
static int answered(void *arg, int status)
{
	struct pbox *px = arg;

	pthread_mutex_lock(&px->mu);
	px->cuda_jobs--;
	pthread_mutex_unlock(&px->mu);
	return status;
}

/* The input's copy queued after the caller's @stream; a fresh call's host
 * call submitted here, once the copy landed. */
static int begin(struct pbox *px, struct cs_call *c, void *stream, bool fresh)
{
	const struct wk_cuda_ops *o = px->cuda_ops;
	int rc = o->mark(px->cuda, stream, &c->mark);

	if (rc == PBOX_OK && c->in_bytes)
		rc = o->copy(px->cuda, c->b->p + c->in_off, c->din, c->in_bytes, c->mark, &c->ev);
	while (rc == PBOX_OK && fresh && c->step == CS_IN)
		if ((rc = step_in(px, c)) == PBOX_EAGAIN) {
			rc = PBOX_OK;
			nap();
		}
	if (rc) {
		drop_events(px, c);
		return rc;
	}
	if (fresh) {
		c->b->epoch = px->epoch + 1;
		c->b->sig = c->sig;
	}
	c->op->px = px;
	c->op->finish = answered;
	c->op->finish_arg = px;
	pthread_mutex_lock(&px->mu);
	px->cuda_jobs++;
	pthread_mutex_unlock(&px->mu);
	pthread_mutex_lock(&px->cst->mu);
	c->next = px->cst->inq;
	px->cst->inq = c;
	pthread_cond_signal(&px->cst->cv);
	pthread_mutex_unlock(&px->cst->mu);
	return PBOX_OK;
}

/* Every _cuda call: @a checked, copied with its counts, staged. */
static int staged(struct pbox *px, const struct cs_call *a, void *stream, struct pbox_handle **opp)
{
	const bool sh = a->kind == CS_REDUCE || a->kind == CS_GATHER;
	struct cs_call *c;
	bool fresh = false;
	int rc;

	if (!px || !opp || (sh && !a->counts) || (!sh && (!a->din || !a->dout)))
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": a NULL argument", cs_fn[a->kind],
			      a->key);
	*opp = NULL;
	c = calloc(1, sizeof(*c) + (sh ? wk_world_n(px) * sizeof(uint64_t) : 0));
	if (!c)
		return wk_err(PBOX_ENOMEM, "%s: out of memory", cs_fn[a->kind]);
	*c = *a;
	c->n = wk_world_n(px);
	if (sh && px->phase == WK_PH_STARTED)
		c->counts = memcpy(c + 1, a->counts, c->n * sizeof(uint64_t));
	rc = shape(px, c);
	if (rc == PBOX_OK)
		rc = cs_open(px, cs_fn[c->kind]);
	if (rc == PBOX_OK)
		rc = check_dev(px, c);
	if (rc == PBOX_OK && !(c->op = calloc(1, sizeof(*c->op))))
		rc = wk_err(PBOX_ENOMEM, "%s: out of memory", cs_fn[c->kind]);
	if (rc == PBOX_OK && (rc = take_buf(px, c, &fresh)) == PBOX_OK &&
	    (rc = begin(px, c, stream, fresh)) != PBOX_OK)
		give_buf(px, c->b);
	if (rc) {
		free(c->op);
		free(c);
		return rc;
	}
	*opp = c->op;
	return PBOX_OK;
}

static int sharded_cuda(struct pbox *px, enum cs_kind kind, uint64_t key, const void *in, void *out,
			const uint64_t *counts, enum pbox_dtype dtype, void *stream,
			struct pbox_handle **opp)
{
	const struct cs_call a = {
		.kind = kind, .key = key, .dtype = dtype, .counts = counts, .din = in, .dout = out};

	return staged(px, &a, stream, opp);
}

int pbox_reduce_scatter_cuda(struct pbox *px, uint64_t key, const void *in, void *out,
			     const uint64_t *counts, enum pbox_dtype dtype, void *stream,
			     struct pbox_handle **opp)
{
	return sharded_cuda(px, CS_REDUCE, key, in, out, counts, dtype, stream, opp);
}

int pbox_all_gather_cuda(struct pbox *px, uint64_t key, const void *in, void *out,
			 const uint64_t *counts, enum pbox_dtype dtype, void *stream,
			 struct pbox_handle **opp)
{
	return sharded_cuda(px, CS_GATHER, key, in, out, counts, dtype, stream, opp);
}

int pbox_broadcast_cuda(struct pbox *px, uint64_t key, void *buf, uint64_t count,
			enum pbox_dtype dtype, uint32_t root, void *stream,
			struct pbox_handle **opp)
{
	const struct cs_call a = {.kind = CS_BCAST,
				  .key = key,
				  .count = count,
				  .dtype = dtype,
				  .root = root,
				  .din = buf,
				  .dout = buf};

	return staged(px, &a, stream, opp);
}

int pbox_push_pull_async_cuda(struct pbox *px, uint64_t key, const void *in, void *out,
			      uint64_t count, enum pbox_dtype dtype, void *stream,
			      struct pbox_handle **opp)
{
	const struct cs_call a = {.kind = CS_ASYNC,
				  .key = key,
				  .count = count,
				  .dtype = dtype,
				  .din = in,
				  .dout = out};

	return staged(px, &a, stream, opp);
}
