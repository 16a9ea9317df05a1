/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Push-pull handles: completed (by the engine, the local thread, or the
 * failure machine, under mu, each change broadcast on cv) and answered to
 * the caller (pbox_test(), pbox_wait()), who then owns nothing of them.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/stage.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_handle.h"

/* Complete @op (under mu). */
void wk_op_complete_locked(struct pbox *px, struct pbox_handle *op, int status, const char *msg)
{
	op->status = status;
	if (msg)
		snprintf(op->msg, sizeof(op->msg), "%s", msg);
	op->done = true;
	if (op->t->busy == op)
		op->t->busy = NULL;
	wk_local_kick(px); /* the leader's pieces: the machine's ranks wait on them */
}

/* Fail every op in flight or queued (under mu). */
void wk_fail_all_locked(struct pbox *px, int status, const char *msg)
{
	for (uint32_t i = 0; i < px->n_t; i++)
		if (px->t[i]->busy && !px->t[i]->busy->done)
			wk_op_complete_locked(px, px->t[i]->busy, status, msg);
	px->subq = px->subq_tail = NULL;
	pthread_cond_broadcast(&px->cv);
}

/* A completed op's result; releases it. Called with mu held. */
static int reap(struct pbox_handle *op)
{
	int st = op->status;

	if (st != PBOX_OK)
		wk_err(st, "%s", op->msg);
	free(op->parts);
	free(op);
	return st;
}

/* A staged CUDA push-pull answered with its status: the module freed its
 * job; pbox_rejoin() counts what is still in flight. */
static void cuda_answered(struct pbox_handle *op)
{
	struct pbox *px = op->px;

	pthread_mutex_lock(&px->mu);
	px->cuda_jobs--;
	pthread_mutex_unlock(&px->mu);
	free(op);
}

/*
 * A sharded collective's handle (shard.c): its pieces reaped as they
 * complete (@wait: waited for), the first failure kept. PBOX_EAGAIN while
 * one is in flight; else the group's result, and the group freed. Called
 * with mu held.
 */
static int reap_group(struct pbox_handle *op, bool wait)
{
	struct pbox *px = op->px;
	bool left = false;

	for (uint32_t i = 0; i < op->n_kids; i++) {
		struct pbox_handle *k = op->kids[i];

		while (k && wait && !k->done)
			pthread_cond_wait(&px->cv, &px->mu);
		if (!k || !k->done) {
			left |= k != NULL;
			continue;
		}
		if (k->status != PBOX_OK && op->status == PBOX_OK) {
			op->status = k->status;
			snprintf(op->msg, sizeof(op->msg), "%s", k->msg);
		}
		free(k->parts);
		free(k);
		op->kids[i] = NULL;
	}
	if (left)
		return PBOX_EAGAIN;
	free(op->kids);
	return reap(op);
}

int pbox_test(struct pbox_handle *op)
{
	int (*fin)(void *, int);
	struct pbox *px;
	void *arg;
	int st;

	if (!op)
		return wk_err(PBOX_EINVAL, "pbox_test: handle is NULL");
	px = op->px;
	if (op->cuda) {
		st = px->cuda_ops->test(px->cuda, op->cuda);
		if (st != PBOX_EAGAIN)
			cuda_answered(op);
		return st;
	}
	pthread_mutex_lock(&px->mu);
	fin = op->finish;
	arg = op->finish_arg;
	st = op->kids ? reap_group(op, false) : op->done ? reap(op) : PBOX_EAGAIN;
	pthread_mutex_unlock(&px->mu);
	return fin && st != PBOX_EAGAIN ? fin(arg, st) : st;
}

int pbox_wait(struct pbox_handle *op)
{
	int (*fin)(void *, int);
	struct pbox *px;
	void *arg;
	int st;

	if (!op)
		return wk_err(PBOX_EINVAL, "pbox_wait: handle is NULL");
	px = op->px;
	if (op->cuda) {
		st = px->cuda_ops->wait(px->cuda, op->cuda);
		cuda_answered(op);
		return st;
	}
	pthread_mutex_lock(&px->mu);
	fin = op->finish;
	arg = op->finish_arg;
	if (op->kids) {
		st = reap_group(op, true);
	} else {
		while (!op->done)
			pthread_cond_wait(&px->cv, &px->mu);
		st = reap(op);
	}
	pthread_mutex_unlock(&px->mu);
	return fin ? fin(arg, st) : st;
}

void wk_drop_schedule(struct pbox *px)
{
	px->net.es.heap_n = px->net.es.turns_n = px->net.es.turns_out = 0;
	px->net.es.over = px->net.es.cur = NULL;
	px->net.es.ord_n = px->net.es.annq_n = px->net.es.annq_head = 0;
	px->net.es.active = px->net.es.tactive = NULL;
}

/* The failure's ops failed, and the engine's pointers into them dropped:
 * by the engine on its own turn, or by the failure machine where no engine
 * runs (wk_raise()). */
void wk_fail_ops(struct pbox *px)
{
	pthread_mutex_lock(&px->mu);
	wk_fail_all_locked(px, px->fail, px->fail_msg);
	pthread_mutex_unlock(&px->mu);
	wk_drop_schedule(px);
	px->net.es.credit_used = 0;
	px->net.es.eng_failed = true;
}
