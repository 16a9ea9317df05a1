/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Local aggregation renewed (pbox_shrink(), pbox_rejoin()): the leader
 * renews its network job, its thread renumbers the world without the
 * machines gone, starts the tensors' rounds over and tells the others
 * (GONE, then RENEW, or FAIL with LMF_RENEW); their threads do the same on
 * RENEW. A machine is one failure domain: one that lost a rank leaves the
 * job.
 */
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_submit.h"
#include "wk_local_msg.h"
#include "wk_local_tensor.h"
#include "wk_local_renew.h"
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

/* ---- renewal: pbox_shrink(), pbox_rejoin() --------------------------------- */

/* Whether @m belongs to another incarnation of the machine (dropped):
 * GONE and RENEW open the next one. */
bool wk_lc_stale(const struct wk_local *lc, const struct lmsg *m)
{
	switch (m->type) {
	case LM_HELLO:
	case LM_BYE:
		return false;
	case LM_GONE:
	case LM_RENEW:
		return m->epoch != lc->epoch + 1;
	default:
		return m->epoch != lc->epoch;
	}
}

/*
 * The world without the machines in lc->gone (their numbers before): the
 * ranks keep their order and are renumbered from 0, as the network job's
 * leaders are (survive.c). -1 where one is no machine this rank knows, or
 * is its own. Under mu.
 */
static int renumber(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	uint32_t *newm = calloc(lc->machines, sizeof(uint32_t)), m2 = 0, n2 = 0, me = 0, j = 0;

	if (!newm)
		return -1;
	for (uint32_t g = 0; g < lc->n_gone; g++) {
		if (lc->gone[g] >= lc->machines || lc->gone[g] == lc->machine) {
			free(newm);
			return -1;
		}
		newm[lc->gone[g]] = UINT32_MAX;
	}
	for (uint32_t m = 0; m < lc->machines; m++)
		if (newm[m] != UINT32_MAX)
			newm[m] = m2++;
	for (uint32_t r = 0; r < lc->world_n; r++) {
		uint32_t nm = newm[lc->mach_of[r]];

		if (nm == UINT32_MAX)
			continue;
		if (r == lc->world_rank)
			me = n2;
		lc->world_peers[n2] = lc->world_peers[r];
		lc->mach_of[n2++] = nm;
	}
	lc->machine = newm[lc->machine];
	lc->machines = m2;
	lc->world_n = n2;
	lc->world_rank = me;
	for (uint32_t r = n2; r-- > 0;)
		lc->leader_of[lc->mach_of[r]] = r;
	for (uint32_t r = 0; r < n2; r++)
		if (lc->mach_of[r] == lc->machine && j < lc->local_size)
			lc->ranks[j++] = r;
	lc->n_gone = 0;
	if (!leader(lc)) { /* its own numbers are the world's */
		px->net.n = px->cfg.worker.world_size = n2;
		px->net.rank = px->cfg.worker.rank = me;
		memcpy(px->cfg.peers, lc->world_peers, n2 * sizeof(*px->cfg.peers));
	}
	free(newm);
	return 0;
}

/* Every tensor's rounds start over; its memory stays (the machine is the
 * same). Under mu; its ops are over. */
static void restart_all(struct wk_local *lc)
{
	for (uint32_t k = 0; k < lc->n_t; k++) {
		struct wk_ltensor *t = lc->t[k];

		t->round = 0;
		t->busy = NULL;
		if (t->in)
			memset(t->in, 0, (size_t)lc->local_size * t->n_pieces * sizeof(uint32_t));
		for (uint32_t i = 0; t->taken && i < t->n_pieces; i++)
			t->taken[i] = lc->local_size - 1;
		if (t->sub)
			memset(t->sub, 0, t->n_pieces * sizeof(*t->sub));
		if (t->st)
			memset(t->st, PC_WAIT, t->n_pieces);
	}
}

/* Leader's thread: the network job was renewed (or not: renew_rc); the
 * machine follows, and its ranks are told. */
void wk_lc_leader_renew(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	struct lmsg m = {.type = LM_RENEW};
	char msg[WK_ERR_LEN];
	int rc;

	pthread_mutex_lock(&px->mu);
	rc = lc->renew_rc;
	snprintf(msg, sizeof(msg), "%s", lc->renew_msg);
	pthread_mutex_unlock(&px->mu);
	if (rc == PBOX_OK) {
		struct lmsg g = {.type = LM_GONE, .epoch = lc->epoch + 1};

		for (uint32_t j = 1; j < lc->local_size; j++)
			for (uint32_t at = 0; lc->fd[j] >= 0 && at < lc->n_gone;
			     at += LM_GONE_MAX) {
				g.count = lc->n_gone - at < LM_GONE_MAX ? lc->n_gone - at
									: LM_GONE_MAX;
				memcpy(g.u.gone, lc->gone + at, g.count * sizeof(uint32_t));
				wk_lc_msg_send(lc->fd[j], &g, LM_SHORT + g.count * sizeof(uint32_t),
					       -1);
			}
		pthread_mutex_lock(&px->mu);
		rc = renumber(px) ? PBOX_ENOMEM : PBOX_OK;
		restart_all(lc);
		pthread_mutex_unlock(&px->mu);
		if (rc)
			snprintf(msg, sizeof(msg), "the machine's new numbers: out of memory");
	}
	if (rc == PBOX_OK) {
		lc->epoch++;
		lc->told = false;
		rc = wk_lc_leader_layout(px, &m.u.ready);
		m.epoch = lc->epoch;
		for (uint32_t j = 1; rc == PBOX_OK && j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				wk_lc_msg_send(lc->fd[j], &m, LM_SHORT + sizeof(m.u.ready), -1);
	}
	if (rc != PBOX_OK)
		for (uint32_t j = 1; j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				wk_lc_say_fail(lc, lc->fd[j], rc, LMF_RENEW, msg);
	pthread_mutex_lock(&px->mu);
	lc->renew_req = false;
	memset(lc->rejoin, 0, lc->local_size * sizeof(bool)); /* the next renewal's */
	lc->n_rejoin = 0;
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
}

/* The others' thread: what pbox_shrink() (or pbox_rejoin()) here waits for. */
void wk_lc_told_renewal(struct pbox *px, int code, const char *msg)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	lc->renew_got = true;
	lc->renew_rc = code;
	lc->n_gone = 0;
	snprintf(lc->renew_msg, sizeof(lc->renew_msg), "%s", msg);
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
}

/* The others' thread, RENEW: the machine's next incarnation @epoch, the
 * world without the machines GONE named; -1 where they make no sense. */
int wk_lc_renew_here(struct pbox *px, uint32_t epoch)
{
	struct wk_local *lc = px->loc;
	int rc;

	lc->told = true; /* whatever was in flight was failed already */
	wk_lc_fail_ops(px, PBOX_EFAILED, "the job was renewed while this push-pull was in flight");
	pthread_mutex_lock(&px->mu);
	rc = renumber(px);
	if (rc == 0)
		restart_all(lc);
	pthread_mutex_unlock(&px->mu);
	if (rc)
		return rc;
	lc->epoch = epoch;
	wk_lc_told_renewal(px, PBOX_OK, "");
	return 0;
}

static bool is_quiet(const struct pbox *px)
{
	return px->loc->quiet || !px->loc->thr_started;
}

static bool renewal_told(const struct pbox *px)
{
	return px->loc->renew_got || px->loc->left;
}

static bool failed_or_told(const struct pbox *px)
{
	return px->fail || renewal_told(px);
}

/* pbox_shrink() and pbox_rejoin() (@fn): refused where this machine left
 * the job (a rank of it was lost), or, for a rejoin (@idle), while any of
 * its push-pulls is in flight. */
int wk_local_can_renew(struct pbox *px, const char *fn, bool idle)
{
	struct wk_local *lc = px->loc;
	char why[WK_ERR_LEN];
	bool left, busy = false;

	pthread_mutex_lock(&px->mu);
	left = lc->left;
	snprintf(why, sizeof(why), "%s", px->fail_msg);
	for (uint32_t i = 0; i < lc->n_t; i++)
		busy |= lc->t[i]->busy != NULL;
	pthread_mutex_unlock(&px->mu);
	if (left)
		return wk_err(PBOX_EFAILED,
			      "%s: this rank's machine left the job, as a machine does when it "
			      "loses a rank (%s): its ranks cannot go on",
			      fn, why);
	if (idle && busy)
		return wk_err(PBOX_ESTATE, "%s: push-pulls are in flight", fn);
	return PBOX_OK;
}

/* Leader, before its network job stops: the local thread failed every op
 * (their network parts waited for), so none is left to touch it. */
void wk_local_quiet(struct pbox *px)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	lc->quiet = false;
	pthread_mutex_unlock(&px->mu);
	kick(lc);
	wk_wait_cond(px, is_quiet, wk_now() + 5000000000ull);
}

/* Leader, after keep_tensors(): a tensor whose pieces are not all kept
 * (some were not laid out yet) declares them again on its next use. */
void wk_local_renet(struct pbox *px)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	for (uint32_t k = 0; k < lc->n_t; k++) {
		struct wk_ltensor *t = lc->t[k];
		uint32_t kept = 0;

		for (uint32_t i = 0; t->net && i < t->n_pieces; i++)
			kept += wk_find_tensor(px, wk_lc_piece_key(t->key, i)) != NULL;
		if (!t->net || kept == t->n_pieces)
			continue;
		t->net = false;
		for (uint32_t i = 0; i < t->n_pieces; i++) { /* its kept pieces go too */
			struct wk_tensor *nt = wk_find_tensor(px, wk_lc_piece_key(t->key, i));
			uint32_t x = 0;

			if (!nt)
				continue;
			while (px->t[x] != nt)
				x++;
			memmove(&px->t[x], &px->t[x + 1], (--px->n_t - x) * sizeof(*px->t));
			wk_tensor_free(nt);
		}
	}
	pthread_mutex_unlock(&px->mu);
}

/* Leader: the network job's renewal ended with @rc (@gone: the machines it
 * went on without, their numbers before); its thread renews the machine
 * and tells its ranks. @rc. */
static bool renewed(const struct pbox *px)
{
	return !px->loc->renew_req || !px->loc->thr_started;
}

/* wk_local_renew(), the others told @msg where @rc is an error. */
static int renew_as(struct pbox *px, int rc, const char *msg, const uint32_t *gone, uint32_t n_gone)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	lc->renew_rc = rc;
	snprintf(lc->renew_msg, sizeof(lc->renew_msg), "%s", rc ? msg : "");
	if (n_gone)
		memcpy(lc->gone, gone, n_gone * sizeof(uint32_t));
	lc->n_gone = n_gone;
	lc->renew_req = true;
	pthread_mutex_unlock(&px->mu);
	kick(lc);
	wk_wait_cond(px, renewed, UINT64_MAX);
	return rc;
}

int wk_local_renew(struct pbox *px, int rc, const uint32_t *gone, uint32_t n_gone)
{
	char msg[WK_ERR_LEN];

	pthread_mutex_lock(&px->mu);
	snprintf(msg, sizeof(msg), "%s", px->fail_msg);
	pthread_mutex_unlock(&px->mu);
	return renew_as(px, rc, msg, gone, n_gone);
}

static bool all_rejoin(const struct pbox *px)
{
	const struct wk_local *lc = px->loc;

	return lc->n_rejoin + 1 >= lc->local_size || lc->n_bye || lc->left || px->fail;
}

/*
 * Leader, pbox_rejoin(): every other rank of the machine called it too
 * (REJOIN), so that none is still finishing its last step when the
 * machine is renewed; up to [tuning] deadline. Where one did not, the
 * others are told and nothing is renewed.
 */
int wk_local_rejoin_wait(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	char late[256] = "", msg[WK_ERR_LEN];
	size_t off = 0;
	bool met = wk_wait_cond(px, all_rejoin, wk_now() + px->cfg.tuning.deadline_us * 1000);

	pthread_mutex_lock(&px->mu);
	if (lc->left || px->fail) { /* pbox_shrink() takes it from here */
		snprintf(msg, sizeof(msg), "%s", px->fail_msg);
		pthread_mutex_unlock(&px->mu);
		return wk_err(PBOX_ESTATE,
			      "pbox_rejoin: the context failed (%s): pbox_shrink() first", msg);
	}
	if (met && !lc->n_bye) {
		pthread_mutex_unlock(&px->mu);
		return PBOX_OK;
	}
	for (uint32_t j = 1; j < lc->local_size && off < sizeof(late); j++)
		if (lc->n_bye ? lc->bye[j] : !lc->rejoin[j])
			off += (size_t)snprintf(late + off, sizeof(late) - off, "%s%u",
						off ? ", " : "", lc->ranks[j]);
	if (lc->n_bye)
		snprintf(msg, sizeof(msg),
			 "pbox_rejoin: rank %s of this machine finalized (every rank of a machine "
			 "calls it at the same point)",
			 late);
	else
		snprintf(msg, sizeof(msg),
			 "pbox_rejoin: rank %s of this machine did not call it within %.1f s "
			 "(every rank of a machine calls it at the same point)",
			 late, (double)px->cfg.tuning.deadline_us / 1e6);
	pthread_mutex_unlock(&px->mu);
	renew_as(px, PBOX_ETIMEDOUT, msg, NULL, 0);
	return wk_err(PBOX_ETIMEDOUT, "%s", msg);
}

/*
 * The others: pbox_shrink() (@shrink) or pbox_rejoin() waits for the
 * leader's renewal of the machine: PBOX_REDO (a shrink: the failed
 * iteration again, from its inputs), PBOX_OK (a rejoin), or the leader's
 * error. A machine that left the job (or lost its leader) cannot go on.
 */
int wk_local_follow_renew(struct pbox *px, const char *fn, bool shrink)
{
	struct wk_local *lc = px->loc;
	uint64_t wait_ns = px->cfg.tuning.deadline_us * 1000 + px->cfg.tuning.heartbeat_us * 1000 +
			   1000000000ull;
	int rc;

	/* a shrink without a failure here yet: one is known within a heartbeat */
	if (shrink && !wk_wait_cond(px, failed_or_told,
				    wk_now() + px->cfg.tuning.heartbeat_us * 1000 + 500000000ull))
		return wk_err(PBOX_ESTATE, "%s: the job lost no rank and not its box", fn);
	if (!shrink) { /* the leader renews once every rank of the machine is here */
		pthread_mutex_lock(&px->mu);
		lc->rejoin_say = true;
		pthread_mutex_unlock(&px->mu);
		kick(lc);
	}
	if (!wk_wait_cond(px, renewal_told, wk_now() + wait_ns) || lc->left) {
		if ((rc = wk_local_can_renew(px, fn, !shrink)))
			return rc;
		return wk_err(PBOX_ETIMEDOUT,
			      "%s: rank %u, this machine's leader, renewed nothing within %.1f s "
			      "(it must call %s too)",
			      fn, lc->ranks[0], (double)wait_ns / 1e9, fn);
	}
	pthread_mutex_lock(&px->mu);
	lc->renew_got = false;
	rc = lc->renew_rc;
	if (rc == PBOX_OK) {
		wk_fail_reset(px);
		lc->resumed = true; /* its thread tells the leader of failures again */
	}
	pthread_mutex_unlock(&px->mu);
	if (rc)
		return wk_err(rc, "%s: rank %u, this machine's leader: %s", fn, lc->ranks[0],
			      lc->renew_msg);
	kick(lc);
	wk_log(px, CFG_LOG_INFO, "%s: rank %u of %u on %u machines (local rank %u)", fn,
	       lc->world_rank, lc->world_n, lc->machines, lc->local_rank);
	return shrink ? PBOX_REDO : PBOX_OK;
}
