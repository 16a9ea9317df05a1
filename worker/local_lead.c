/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Local aggregation's thread: the leader's pieces (summed on the CPU or
 * the GPU as soon as every local part is in, pushed to the network job,
 * the result handed back), the other ranks' side (their part in, the sum
 * taken), the messages of each side dispatched, and the thread's loop.
 */
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_submit.h"
#include "wk_local_msg.h"
#include "wk_local_tensor.h"
#include "wk_local_renew.h"
#include "wk_local_lead.h"
#include "local.h"
#include "cuda/stage.h"
#include "sum.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Leader: sum piece @i of @t (its own part @own and every local one) into region 0. */
static void sum_piece(struct wk_local *lc, const struct wk_ltensor *t, uint32_t i,
		      const uint8_t *own)
{
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;
	uint8_t *dst = t->map + first * esz;

	if (n > t->piece_elems)
		n = t->piece_elems;
	if (t->dtype == SUM_FP32) {
		memcpy(dst, own + first * esz, n * esz);
		for (uint32_t j = 1; j < lc->local_size; j++)
			lc->ops->add[SUM_FP32](dst, t->map + j * t->stride + first * esz, n);
		return;
	}
	lc->ops->load[t->dtype](lc->acc, own + first * esz, n);
	for (uint32_t j = 1; j < lc->local_size; j++)
		lc->ops->add[t->dtype](lc->acc, t->map + j * t->stride + first * esz, n);
	lc->ops->store[t->dtype](dst, lc->acc, n);
}

/* Leader, the @len bytes at @off of a gather's or a broadcast's shard:
 * its root's data into region 0 where the root is on this machine (from
 * @own, the leader's, or from the root's region), for the network and for
 * the machine's ranks. */
static void give_piece(struct wk_local *lc, const struct wk_ltensor *t, const uint8_t *own,
		       uint64_t off, uint64_t len)
{
	int j = local_of(lc, t->croot);

	if (j >= 0)
		memcpy(t->map + off, j ? t->map + (uint64_t)j * t->stride + off : own + off, len);
}

/* Leader: piece @i (@n elements at @host, region 0) to the network job: a
 * push-pull, or a shard's piece rooted at its root's machine, which gives
 * region 0 where this machine gives and takes into it where it takes. */
static int push_piece(struct pbox *px, struct wk_ltensor *t, uint32_t i, uint8_t *host, uint64_t n)
{
	const struct wk_local *lc = px->loc;
	const uint64_t key = wk_lc_piece_key(t->key, i);
	uint32_t m;
	bool root, gives, takes;

	if (!t->ckind) {
		/* a compressed piece summed by all-gather (gsum.c): among the
		 * machines' leaders, the machine's sum compressed (only a job
		 * that compresses has such pieces) */
		int (*gsum)(struct pbox *, struct wk_tensor *, const void *, void *,
			    struct pbox_handle **) = NULL;
		struct wk_tensor *nt = NULL;
		int rc = PBOX_EAGAIN;

		if (px->cfg.job.compression != COMP_NONE) {
			pthread_mutex_lock(&px->mu);
			gsum = px->gsum_net;
			nt = gsum ? wk_find_tensor(px, key) : NULL;
			pthread_mutex_unlock(&px->mu);
		}
		if (nt)
			rc = gsum(px, nt, host, host, &t->sub[i]);
		if (rc != PBOX_EAGAIN)
			return rc;
		return wk_push_pull(px, key, host, host, n, (enum pbox_dtype)t->dtype, &t->sub[i]);
	}
	/* a reduce: every machine gives, the root's takes; a gather or a
	 * broadcast: the root's gives, the others take */
	m = lc->mach_of[t->croot];
	root = m == lc->machine;
	gives = t->ckind == WK_REDUCE || root;
	takes = (t->ckind == WK_REDUCE) == root;
	return wk_collective(px, "pbox_local_shard", key, gives ? host : NULL, takes ? host : NULL,
			     n, (enum pbox_dtype)t->dtype, t->ckind, m, t->grp, &t->sub[i]);
}

/* Leader: @op ends with @rc (and the message it set), its work in flight
 * waited for first; true. */
static bool lead_over(struct pbox *px, struct pbox_handle *op, int rc)
{
	char msg[WK_ERR_LEN];

	snprintf(msg, sizeof(msg), "%s", pbox_last_error());
	wk_lc_release(px, op->lt);
	wk_lc_op_done(px, op, rc, msg);
	return true;
}

/* A copy or sum on the GPU failed (the error set): every rank of the
 * machine waits on it, so the machine's job fails, every op with it; false. */
static bool gpu_fail(struct pbox *px)
{
	wk_lc_raise(px, PBOX_ENODEV, "%s", pbox_last_error());
	return false;
}

/* Whether the GPU's work behind *@ev has landed (1: the event gone; also
 * when there is none), 0 not yet, -1 it failed (the job with it). */
static int ev_landed(struct pbox *px, void **ev)
{
	int rc;

	if (!*ev)
		return 1;
	rc = wk_lc_cu(px)->done(px->cuda, *ev);
	if (rc)
		*ev = NULL;
	if (rc < 0)
		gpu_fail(px);
	return rc < 0 ? -1 : rc;
}

/* ev_landed() for piece @i of @t (host tensors have no events). */
static int landed(struct pbox *px, struct wk_ltensor *t, uint32_t i)
{
	return t->ev ? ev_landed(px, &t->ev[i]) : 1;
}

/* Leader: piece @i's result is in @op's output: the others told; true when
 * that was the op's last. */
static bool piece_out(struct pbox *px, struct pbox_handle *op, uint32_t i)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;

	t->taken[i] = 0;
	t->st[i] = PC_DONE;
	for (uint32_t j = 1; j < lc->local_size; j++)
		wk_lc_say(lc, lc->fd[j], LM_OUT, t->key, op->round, i);
	if (--op->left)
		return false;
	wk_lc_op_done(px, op, PBOX_OK, NULL);
	return true;
}

/* Leader: whether piece @i of @op may be summed: every local part of this
 * round is in, and every rank took the piece's last result. */
static bool piece_ready(const struct wk_local *lc, const struct pbox_handle *op, uint32_t i)
{
	const struct wk_ltensor *t = op->lt;

	for (uint32_t j = 1; j < lc->local_size; j++)
		if (t->in[j * t->n_pieces + i] != op->round + 1)
			return false;
	return t->taken[i] == lc->local_size - 1;
}

#define LEAD_NEXT (-1) /* lead_piece(): on to the next piece */

/* Piece @i of the leader's @op one step on its way: its parts summed
 * (WAIT to SUM), pushed to the network once landed (NET), its sum back
 * (BACK) and out to the ranks. LEAD_NEXT, or what lead() returns. */
static int lead_piece(struct pbox *px, struct pbox_handle *op, uint32_t i)
{
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;
	uint8_t *host = t->map + first * esz;
	int rc;

	if (n > t->piece_elems)
		n = t->piece_elems;
	if (t->st[i] == PC_WAIT) {
		if (!piece_ready(px->loc, op, i))
			return LEAD_NEXT;
		if (t->ckind == WK_GATHER || t->ckind == WK_BCAST)
			give_piece(px->loc, t, op->in, first * esz, n * esz);
		else if (!op->dev) /* a push-pull's or a reduce's */
			sum_piece(px->loc, t, i, op->in);
		else if (wk_lc_gpu_sum(px, op, i, first, n))
			return gpu_fail(px);
		t->st[i] = PC_SUM;
	}
	if (t->st[i] == PC_SUM) { /* summed; on the GPU: once here for the network */
		rc = landed(px, t, i);
		if (rc <= 0)
			return rc < 0 ? false : LEAD_NEXT;
		rc = push_piece(px, t, i, host, n);
		if (rc)
			return lead_over(px, op, rc);
		t->st[i] = PC_NET;
	}
	if (t->st[i] == PC_NET) {
		rc = pbox_test(t->sub[i]);
		if (rc == PBOX_EAGAIN)
			return LEAD_NEXT;
		t->sub[i] = NULL;
		if (rc)
			return lead_over(px, op, rc);
		if (op->dev) {
			if (wk_lc_gpu_back(px, op, i, first, n))
				return gpu_fail(px);
			t->st[i] = PC_BACK;
			return LEAD_NEXT;
		}
		if (lt_takes(t, px->loc->world_rank))
			memcpy(op->out + first * esz, host, n * esz);
		return piece_out(px, op, i) ? true : LEAD_NEXT;
	}
	if (t->st[i] == PC_BACK && landed(px, t, i) > 0 && piece_out(px, op, i))
		return true;
	return LEAD_NEXT;
}

/* Leader: move @op on as far as it goes; true when it is over. */
static bool lead(struct pbox *px, struct pbox_handle *op)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;

	if (!t->map) {
		if (wk_lc_lt_map(lc, t, -1)) {
			wk_lc_raise(px, PBOX_ENOMEM,
				    "key %" PRIu64 ": the machine's memory for it: %s", t->key,
				    strerror(errno));
			return false;
		}
	}
	if (op->dev && wk_lc_lt_gpu(px, t) != PBOX_OK)
		return gpu_fail(px);
	for (uint32_t j = 1; lc->n_bye && j < lc->local_size; j++) /* its part cannot come */
		if (lc->bye[j]) {
			wk_lc_raise(px, PBOX_EPEER,
				    "key %" PRIu64
				    ": rank %u (on this machine) finalized: a push-pull "
				    "needs every rank of the machine",
				    t->key, lc->ranks[j]);
			return false;
		}
	if (!op->lstarted) { /* first look: every piece waits */
		memset(t->st, PC_WAIT, t->n_pieces);
		op->left = t->n_pieces;
		op->lstarted = true;
	}
	for (uint32_t i = 0; i < t->n_pieces; i++) {
		int r = lead_piece(px, op, i);

		if (r != LEAD_NEXT)
			return r;
	}
	return false;
}

/* The others: start @op (its part in, the leader told); true when it waits
 * for results, false while the tensor's memory is not here yet or its
 * input is still on its way to the GPU buffer. */
static bool follow(struct pbox *px, struct pbox_handle *op)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);

	if (!t->asked) {
		struct lmsg m = {.type = LM_TENSOR,
				 .epoch = lc->epoch,
				 .key = t->key,
				 .count = t->count,
				 .dtype = t->dtype};
		size_t len = LM_SHORT;

		if (t->dev) { /* its buffer, shared with the leader */
			if (wk_lc_lt_gpu(px, t))
				return gpu_fail(px);
			m.flags = LMF_DEV;
			m.u.ipc = t->dh;
			len += sizeof(m.u.ipc);
		}
		wk_lc_msg_send(lc->fd[0], &m, len, -1);
		t->asked = true;
	}
	if (!t->map || (t->dev && !t->dpeer[0]))
		return false;
	if (t->dev) { /* the input to the shared buffer first, after the caller's stream */
		if (!t->ev_in &&
		    wk_lc_cu(px)->copy(px->cuda, t->dbuf, op->in, t->bytes, op->cev, &t->ev_in))
			return gpu_fail(px);
		if (ev_landed(px, &t->ev_in) <= 0) /* not yet, or the job failed */
			return false;
	}
	op->left = t->n_pieces;
	for (uint32_t i = 0; i < t->n_pieces; i++) { /* the leader sums piece i meanwhile */
		uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;

		if (n > t->piece_elems)
			n = t->piece_elems;
		if (!t->dev && lt_gives(t, lc->world_rank))
			memcpy(t->map + lc->local_rank * t->stride + first * esz,
			       op->in + first * esz, n * esz);
		wk_lc_say(lc, lc->fd[0], LM_IN, t->key, op->round, i);
	}
	return true;
}

/* The others, CUDA tensors: the pieces of @op copied from the leader's
 * buffer that have landed; true when it ended. */
static bool follow_back(struct pbox *px, struct pbox_handle *op)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;

	for (uint32_t i = 0; i < t->n_pieces; i++) {
		int rc;

		if (!t->ev[i])
			continue;
		rc = landed(px, t, i);
		if (rc < 0)
			return false;
		if (rc == 0)
			continue;
		wk_lc_say(lc, lc->fd[0], LM_TAKEN, t->key, op->round, i);
		if (--op->left == 0) {
			wk_lc_op_done(px, op, PBOX_OK, NULL);
			return true;
		}
	}
	return false;
}

static int act_add(struct wk_local *lc, struct pbox_handle *op)
{
	if (lc->n_act == lc->cap_act) {
		uint32_t cap = lc->cap_act ? lc->cap_act * 2 : 64;
		struct pbox_handle **v = realloc(lc->act, cap * sizeof(*v));

		if (!v)
			return -1;
		lc->act = v;
		lc->cap_act = cap;
	}
	lc->act[lc->n_act++] = op;
	return 0;
}

/* The op of @t's round @round in flight here, or NULL. */
static struct pbox_handle *op_of(const struct wk_local *lc, const struct wk_ltensor *t,
				 uint32_t round)
{
	for (uint32_t a = 0; a < lc->n_act; a++)
		if (lc->act[a]->lt == t && lc->act[a]->round == round)
			return lc->act[a];
	return NULL;
}

/* Rank @j's tensor @m as the machine's (@t: NULL on its first word): its
 * shape and memory kind the same on every rank; NULL with the machine
 * failed when not. */
static struct wk_ltensor *rank_tensor_agrees(struct pbox *px, uint32_t j, const struct lmsg *m,
					     struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	uint32_t r = lc->ranks[j];
	bool dev;

	if ((unsigned)m->dtype >= SUM_DTYPE_COUNT || m->count == 0 ||
	    m->count > (1ull << 40) / sum_dtype_size((enum sum_dtype)m->dtype)) {
		wk_lc_raise(px, PBOX_EINVAL,
			    "rank %u on this machine asked for key %" PRIu64 " of %" PRIu64
			    " elements of dtype %u",
			    r, m->key, m->count, m->dtype);
		return NULL;
	}
	if (!t) { /* found again under mu: this rank's own first call may have added it since */
		pthread_mutex_lock(&px->mu);
		t = wk_lc_lt_find(lc, m->key);
		if (!t)
			t = wk_lc_lt_add(lc, m->key, m->count, m->dtype, 0);
		pthread_mutex_unlock(&px->mu);
		if (!t) {
			wk_lc_raise(px, PBOX_ENOMEM, "key %" PRIu64 ": out of memory", m->key);
			return NULL;
		}
	}
	if (t->count != m->count || t->dtype != m->dtype) {
		wk_lc_raise(px, PBOX_EMISMATCH,
			    "key %" PRIu64 ": rank %u uses %" PRIu64 " elements of %s, rank %u "
			    "(on the same machine) %" PRIu64 " of %s",
			    m->key, r, m->count, sum_dtype_name((enum sum_dtype)m->dtype),
			    lc->world_rank, t->count, sum_dtype_name((enum sum_dtype)t->dtype));
		return NULL;
	}
	pthread_mutex_lock(&px->mu);
	if (!t->kind) { /* the first word on it: the kind every rank must use */
		t->kind = true;
		t->dev = m->flags & LMF_DEV;
	}
	dev = t->dev; /* this rank's own push-pull sets it too (under mu) */
	pthread_mutex_unlock(&px->mu);
	if (dev != !!(m->flags & LMF_DEV)) {
		wk_lc_raise(px, PBOX_EMISMATCH,
			    "key %" PRIu64 ": rank %u sums %s memory, rank %u (on the same "
			    "machine) %s memory; [worker] local_cuda must be the same on "
			    "both",
			    m->key, r, wk_lc_mem_kind(m->flags & LMF_DEV), lc->world_rank,
			    wk_lc_mem_kind(dev));
		return NULL;
	}
	return t;
}

/* LM_TENSOR from rank @j: the tensor mapped (and, in GPU memory, the
 * rank's buffer opened here), and TENSOR_OK back with the machine's. */
static void rank_tensor(struct pbox *px, uint32_t j, const struct lmsg *m, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	struct lmsg ok = {.type = LM_TENSOR_OK, .epoch = lc->epoch, .key = m->key};
	size_t len = LM_SHORT;
	uint32_t r = lc->ranks[j];

	t = rank_tensor_agrees(px, j, m, t);
	if (!t)
		return;
	if (!t->map && wk_lc_lt_map(lc, t, -1)) {
		wk_lc_raise(px, PBOX_ENOMEM, "key %" PRIu64 ": the machine's memory for it: %s",
			    m->key, strerror(errno));
		return;
	}
	if (t->dev) { /* its buffer opened here, the leader's sent back */
		if (t->dpeer && t->dpeer[j]) {
			wk_lc_raise(px, PBOX_EINVAL,
				    "rank %u on this machine asked for key %" PRIu64 " twice", r,
				    m->key);
			return;
		}
		if (wk_cuda_load(px, "local aggregation") || wk_lc_lt_gpu(px, t) ||
		    wk_lc_cu(px)->dev_open(px->cuda, &m->u.ipc, &t->dpeer[j])) {
			wk_lc_raise(px, PBOX_ENODEV, "key %" PRIu64 ": rank %u's GPU memory: %s",
				    m->key, r, pbox_last_error());
			return;
		}
		ok.flags = LMF_DEV;
		ok.u.ipc = t->dh;
		len += sizeof(ok.u.ipc);
	}
	wk_lc_msg_send(lc->fd[j], &ok, len, t->memfd);
}

/* LM_IN (its part of a piece is in) or LM_TAKEN (it took the sum) from rank @j. */
static void rank_piece(struct pbox *px, uint32_t j, const struct lmsg *m, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;

	if (!t || !t->map || m->piece >= t->n_pieces || (t->dev && !t->dpeer[j])) {
		wk_lc_raise(px, PBOX_EINVAL,
			    "rank %u on this machine sent %s for key %" PRIu64 " piece %u, "
			    "which it was never given",
			    lc->ranks[j], m->type == LM_IN ? "IN" : "TAKEN", m->key, m->piece);
		return;
	}
	if (m->type == LM_IN)
		t->in[j * t->n_pieces + m->piece] = m->round + 1;
	else if (t->taken[m->piece] < lc->local_size - 1)
		t->taken[m->piece]++;
}

/* Leader: a message from local rank @j. */
static void from_rank(struct pbox *px, uint32_t j, const struct lmsg *m)
{
	struct wk_local *lc = px->loc;
	uint32_t r = lc->ranks[j];
	struct wk_ltensor *t = wk_lc_lt_get(px, m->key);

	switch (m->type) {
	case LM_TENSOR:
		rank_tensor(px, j, m, t);
		return;
	case LM_IN:
	case LM_TAKEN:
		rank_piece(px, j, m, t);
		return;
	case LM_FAIL:
		wk_lc_raise(px, m->code ? m->code : PBOX_EPEER, "rank %u (on this machine): %s", r,
			    m->u.text);
		return;
	case LM_REJOIN:
		pthread_mutex_lock(&px->mu);
		if (!lc->rejoin[j]) {
			lc->rejoin[j] = true;
			lc->n_rejoin++;
			pthread_cond_broadcast(&px->cv);
		}
		pthread_mutex_unlock(&px->mu);
		return;
	case LM_BYE:
		pthread_mutex_lock(&px->mu);
		lc->bye[j] = true;
		lc->n_bye++;
		pthread_cond_broadcast(&px->cv); /* a pbox_rejoin() waiting for it */
		pthread_mutex_unlock(&px->mu);
		return; /* lead() fails the ops in flight, which need its part */
	default:
		wk_lc_raise(px, PBOX_EINVAL, "rank %u on this machine sent message type %u", r,
			    m->type);
	}
}

/* TENSOR_OK from the leader: the machine's memory for tensor @t (@memfd)
 * mapped here, and its GPU buffer opened. */
static void leader_tensor(struct pbox *px, const struct lmsg *m, int memfd, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;

	if (!t || t->map || memfd < 0 || wk_lc_lt_map(lc, t, memfd)) {
		if (memfd >= 0 && (!t || t->map))
			close(memfd);
		wk_lc_raise(px, PBOX_EPEER,
			    "key %" PRIu64 ": the machine's memory for it from rank %u: %s", m->key,
			    lc->ranks[0], memfd < 0 ? "none came" : strerror(errno));
		return;
	}
	if (t->dev != !!(m->flags & LMF_DEV)) {
		wk_lc_raise(px, PBOX_EPEER,
			    "key %" PRIu64 ": rank %u (this machine's leader) answered for %s "
			    "memory, this rank sums %s memory",
			    m->key, lc->ranks[0], wk_lc_mem_kind(m->flags & LMF_DEV),
			    wk_lc_mem_kind(t->dev));
		return;
	}
	if (t->dev && wk_lc_cu(px)->dev_open(px->cuda, &m->u.ipc, &t->dpeer[0]))
		wk_lc_raise(px, PBOX_ENODEV,
			    "key %" PRIu64 ": the GPU memory of rank %u (this machine's "
			    "leader): %s",
			    m->key, lc->ranks[0], pbox_last_error());
}

/* OUT from the leader: a piece's sum, copied out of the machine's memory
 * (from GPU memory: TAKEN once the copy lands), and the op done with its
 * last piece. */
static void leader_out(struct pbox *px, const struct lmsg *m, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	struct pbox_handle *op = t ? op_of(lc, t, m->round) : NULL;
	uint64_t first, n;
	size_t esz;

	if (!op || !t->map || m->piece >= t->n_pieces || op->left == 0) {
		wk_lc_raise(px, PBOX_EPEER,
			    "rank %u (this machine's leader) sent a result of key %" PRIu64
			    " round %u piece %u, which is not in flight here",
			    lc->ranks[0], m->key, m->round, m->piece);
		return;
	}
	esz = sum_dtype_size((enum sum_dtype)t->dtype);
	first = (uint64_t)m->piece * t->piece_elems;
	n = t->count - first < t->piece_elems ? t->count - first : t->piece_elems;
	if (t->dev) { /* TAKEN once its copy from the leader's buffer landed */
		if (t->ev[m->piece] ||
		    wk_lc_cu(px)->copy(px->cuda, op->out + first * esz,
				       (const uint8_t *)t->dpeer[0] + first * esz, n * esz, NULL,
				       &t->ev[m->piece]))
			wk_lc_raise(px, PBOX_EPEER,
				    "key %" PRIu64 " round %u piece %u from rank %u "
				    "(this machine's leader): %s",
				    m->key, m->round, m->piece, lc->ranks[0],
				    t->ev[m->piece] ? "its result came twice" : pbox_last_error());
		return;
	}
	if (lt_takes(t, lc->world_rank))
		memcpy(op->out + first * esz, t->map + first * esz, n * esz);
	wk_lc_say(lc, lc->fd[0], LM_TAKEN, t->key, m->round, m->piece);
	if (--op->left == 0) {
		for (uint32_t a = 0; a < lc->n_act; a++)
			if (lc->act[a] == op)
				lc->act[a] = lc->act[--lc->n_act];
		wk_lc_op_done(px, op, PBOX_OK, NULL);
	}
}

/* FAIL from the leader: the machine's failure, a renewal's outcome, or
 * this rank left out. */
static void leader_fail(struct pbox *px, const struct lmsg *m)
{
	struct wk_local *lc = px->loc;

	lc->told = true;	    /* the leader's word: not echoed back */
	if (m->flags & LMF_RENEW) { /* pbox_shrink() waits for this */
		wk_lc_told_renewal(px, m->code < 0 ? m->code : PBOX_EPEER, m->u.text);
		return;
	}
	if (m->flags & LMF_LEFT) {
		pthread_mutex_lock(&px->mu);
		lc->left = true;
		pthread_cond_broadcast(&px->cv);
		pthread_mutex_unlock(&px->mu);
	}
	wk_lc_raise(px, m->code ? m->code : PBOX_EPEER, "%s", m->u.text);
}

/* The others: a message from the leader. */
static void from_leader(struct pbox *px, const struct lmsg *m, int memfd)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = wk_lc_lt_get(px, m->key);

	if (memfd >= 0 && m->type != LM_TENSOR_OK)
		close(memfd); /* only TENSOR_OK carries one */
	switch (m->type) {
	case LM_TENSOR_OK:
		leader_tensor(px, m, memfd, t);
		return;
	case LM_OUT:
		leader_out(px, m, t);
		return;
	case LM_FAIL:
		leader_fail(px, m);
		return;
	case LM_GONE:
		if (m->count > LM_GONE_MAX || lc->n_gone + m->count >= lc->machines) {
			wk_lc_raise(px, PBOX_EPEER,
				    "rank %u (this machine's leader) named more machines gone than "
				    "there are (%u)",
				    lc->ranks[0], lc->machines);
			return;
		}
		pthread_mutex_lock(&px->mu);
		memcpy(lc->gone + lc->n_gone, m->u.gone, m->count * sizeof(uint32_t));
		lc->n_gone += (uint32_t)m->count;
		pthread_mutex_unlock(&px->mu);
		return;
	case LM_RENEW:
		lc->li = m->u.ready;
		if (wk_lc_renew_here(px, m->epoch))
			wk_lc_raise(px, PBOX_EPEER,
				    "rank %u (this machine's leader) renewed the job without "
				    "machines this rank does not know",
				    lc->ranks[0]);
		return;
	default:
		wk_lc_raise(px, PBOX_EPEER, "rank %u (this machine's leader) sent message type %u",
			    lc->ranks[0], m->type);
	}
}

/* Every message waiting on connection @j. */
static void drain(struct pbox *px, uint32_t j)
{
	struct wk_local *lc = px->loc;
	struct lmsg m;
	int memfd;

	while (lc->fd[j] >= 0) {
		ssize_t n = wk_lc_msg_recv(lc->fd[j], &m, &memfd, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			bool bye = leader(lc) && lc->bye[j];

			close(lc->fd[j]);
			lc->fd[j] = -1;
			if (bye)
				return;
			pthread_mutex_lock(&px->mu);
			lc->left = true; /* the machine is one failure domain */
			pthread_cond_broadcast(&px->cv);
			pthread_mutex_unlock(&px->mu);
			if (leader(lc)) /* the others count this machine gone */
				wk_raise(
					px, WK_FK_LEAVE, 0, px->net.rank,
					"rank %u (pid %d, on rank %u's machine) went away: %s; the "
					"machine leaves the job",
					lc->ranks[j], (int)lc->pid[j], lc->world_rank,
					n == 0 ? "its connection closed" : strerror(errno));
			else
				wk_lc_raise(px, PBOX_EPEER,
					    "rank %u (this machine's leader) went away: %s",
					    lc->ranks[0],
					    n == 0 ? "its connection closed" : strerror(errno));
			return;
		}
		if (wk_lc_stale(lc, &m)) { /* of an earlier incarnation: its ops are over */
			if (memfd >= 0)
				close(memfd);
			continue;
		}
		if (leader(lc)) {
			if (memfd >= 0)
				close(memfd);
			from_rank(px, j, &m);
		} else {
			from_leader(px, &m, memfd);
		}
	}
}

/* Take the queued ops; move every op on. */
static void progress(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	struct pbox_handle *op = wk_lc_take_queue(px);

	while (op) {
		struct pbox_handle *next = op->next;

		op->next = NULL;
		if (act_add(lc, op))
			wk_lc_op_done(px, op, PBOX_ENOMEM, "pbox_push_pull: out of memory");
		op = next;
	}
	lc->n_dev = 0;
	for (uint32_t a = 0; a < lc->n_act;) {
		op = lc->act[a];
		if (leader(lc) && lead(px, op)) {
			lc->act[a] = lc->act[--lc->n_act];
			continue;
		}
		if (!leader(lc) && !op->lstarted) /* then its results come as OUT */
			op->lstarted = follow(px, op);
		else if (!leader(lc) && op->dev && follow_back(px, op)) {
			lc->act[a] = lc->act[--lc->n_act];
			continue;
		}
		lc->n_dev += op->dev;
		a++;
	}
}

static bool all_bye(const struct wk_local *lc)
{
	for (uint32_t j = 1; j < lc->local_size; j++)
		if (lc->fd[j] >= 0 && !lc->bye[j])
			return false;
	return true;
}

/* One turn's word from the other threads: stop, a failure (its ops failed
 * and the thread quiet), a renewal to lead, a REJOIN to say; @stop and
 * @fail: what it found. */
static void local_turn(struct pbox *px, bool *stop, int *fail)
{
	struct wk_local *lc = px->loc;
	struct pbox_handle *q = NULL;
	char msg[WK_ERR_LEN];
	bool renew, rejoin;

	pthread_mutex_lock(&px->mu);
	*stop = lc->stop || px->aborted;
	lc->aborted = px->aborted;
	*fail = px->fail;
	if (*fail) { /* the ops queued under this failure, not those after its reset */
		q = lc->q;
		lc->q = lc->q_tail = NULL;
	}
	renew = lc->renew_req;
	snprintf(msg, sizeof(msg), "%s", px->fail_msg);
	if (lc->resumed) { /* pbox_shrink() took the renewal: a new failure is told */
		lc->resumed = false;
		lc->told = false;
	}
	rejoin = lc->rejoin_say;
	lc->rejoin_say = false;
	pthread_mutex_unlock(&px->mu);
	if (rejoin && !leader(lc) && lc->fd[0] >= 0)
		wk_lc_say(lc, lc->fd[0], LM_REJOIN, 0, 0, 0);
	if (*fail) {
		wk_lc_fail_taken(px, q, *fail, msg);
		pthread_mutex_lock(&px->mu);
		lc->quiet = true;
		pthread_cond_broadcast(&px->cv);
		pthread_mutex_unlock(&px->mu);
	}
	if (renew)
		wk_lc_leader_renew(px);
}

/* Wait for a message or a kick (the GPU's events are polled: a short nap
 * while any is out) and read what came: -1 when poll() failed. */
static int local_wait(struct pbox *px, struct pollfd *p, uint32_t nfd)
{
	struct wk_local *lc = px->loc;
	uint64_t v;
	int r;

	p[0] = (struct pollfd){.fd = lc->efd, .events = POLLIN};
	if (leader(lc))
		for (uint32_t j = 1; j < lc->local_size; j++)
			p[j] = (struct pollfd){.fd = lc->fd[j], .events = POLLIN};
	else
		p[1] = (struct pollfd){.fd = lc->fd[0], .events = POLLIN};
	if (lc->n_dev) {
		const struct timespec nap = {0, 20000};

		r = poll(p, nfd, 0);
		if (r == 0)
			nanosleep(&nap, NULL);
	} else {
		r = poll(p, nfd, 100);
	}
	if (r < 0 && errno != EINTR)
		return -1;
	if (p[0].revents & POLLIN && read(lc->efd, &v, sizeof(v)) < 0) {
		/* read by an earlier turn */
	}
	for (uint32_t j = 1; j < nfd; j++)
		if (p[j].revents)
			drain(px, leader(lc) ? j : 0);
	return 0;
}

void *wk_lc_thread(void *arg)
{
	struct pbox *px = arg;
	struct wk_local *lc = px->loc;
	uint32_t nfd = leader(lc) ? lc->local_size : 2;
	struct pollfd *p = calloc(nfd, sizeof(*p));
	uint64_t stop_by = 0;

	pthread_setname_np(pthread_self(), "pbox-local");
	if (!p) {
		wk_lc_raise(px, PBOX_ENOMEM, "the local aggregation thread: out of memory");
		wk_lc_fail_ops(px, PBOX_ENOMEM, "the local aggregation thread: out of memory");
		return NULL;
	}
	for (;;) {
		bool stop;
		int fail;

		local_turn(px, &stop, &fail);
		if (stop && !stop_by)
			stop_by = wk_now() + px->cfg.tuning.deadline_us * 1000;
		if (stop && (!leader(lc) || all_bye(lc) || wk_now() > stop_by || lc->aborted))
			break; /* pbox_abort(): no waiting for the machine's BYE */
		if (!fail)
			progress(px);
		if (local_wait(px, p, nfd))
			break;
	}
	lc->told = true; /* the leader's ranks said BYE: nothing to tell */
	wk_lc_fail_ops(px, PBOX_EFAILED, "the context was finalized with this push-pull in flight");
	/* GPU memory given back before BYE: the leader frees its buffer once
	 * every rank has closed what it opened of it */
	for (uint32_t i = 0; i < lc->n_t; i++)
		wk_lc_lt_gpu_free(px, lc->t[i]);
	if (!leader(lc) && lc->fd[0] >= 0)
		wk_lc_say(lc, lc->fd[0], LM_BYE, 0, 0, 0);
	free(p);
	return NULL;
}
