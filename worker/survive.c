/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Going on after a failure (pbox_shrink()): the survivors of a job that
 * lost ranks, or its box, become a new incarnation of it without
 * restarting their processes. It is a bootstrap again (boot.c), over what
 * every survivor already knows:
 *
 *   - who is gone: the ranks named by the failure itself (LOST, a closed or
 *     silent connection to rank 0), recorded as it happened; the rest keep
 *     their order and are renumbered from 0, so the lowest survivor is the
 *     new rank 0 and listens where every survivor expects it (its data
 *     address, TCP);
 *   - the boxes: each kept unless it was the failure (PBOX_EBOX: it went
 *     away or timed out; rank 0 knows which, and after a shrink any box
 *     that does not answer is left out too), and the job goes on with the
 *     others, k their bandwidth over B, or without any, k = 0, the lost
 *     box's chunks laid onto the other boxes and the survivors' SS_GPUs;
 *   - the tensors: those every rank had laid out, declared again (their
 *     rounds from 0); others are new tensors again on their next use;
 *   - the job id: a function of the configured one and the incarnation, so
 *     that a registration the box still holds for the old one (its rank 0
 *     cut off, not yet timed out) is no obstacle, and a new nonce drawn by
 *     the new rank 0: datagrams of the old incarnation fail the MAC.
 *
 * The bootstrap's own check is the survivors' agreement: a survivor that
 * counts another set of ranks gone sends another peers list and every
 * survivor fails naming it. A rank that disappears during the shrink is
 * named as one that never reached rank 0.
 */
#include "pbox_int.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Incarnation @epoch's job id at the box: never 0, never the first's. */
static uint32_t epoch_job(uint32_t job, uint32_t epoch)
{
	uint64_t z = ((uint64_t)job << 32 | epoch) + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (uint32_t)z ? (uint32_t)z : 1;
}

/* Keep the tensors every rank laid out, as declared ones; drop the rest. */
static void keep_tensors(struct pbox *px)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < px->n_t; i++) {
		struct wk_tensor *t = px->t[i];

		if (!t->ready) {
			free(t);
			continue;
		}
		*t = (struct wk_tensor){.key = t->key,
					.count = t->count,
					.bytes = t->bytes,
					.prio = t->prio,
					.dtype = t->dtype};
		px->t[kept++] = t;
	}
	px->n_t = kept;
}

int pbox_shrink(struct pbox *px)
{
	uint32_t n = 0, me = UINT32_MAX, first_job, gone = 0;
	char why[WK_ERR_LEN], box[192] = "";
	bool lost_box;
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_shrink: context is NULL");
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_shrink: the context is not started");
	if (px->loc)
		return wk_err(PBOX_ESTATE, "pbox_shrink: not with local aggregation (yet)");
	pthread_mutex_lock(&px->mu);
	rc = px->fail;
	snprintf(why, sizeof(why), "%s", px->fail_msg);
	pthread_mutex_unlock(&px->mu);
	for (uint32_t r = 0; px->gone && r < px->n; r++)
		gone += px->gone[r];
	lost_box = rc == PBOX_EBOX && px->cfg.box.control.n;
	if (!rc || (!gone && !lost_box))
		return wk_err(PBOX_ESTATE, "pbox_shrink: the job lost no rank and not its box%s%s",
			      rc ? ": " : "", rc ? why : "");
	/* this incarnation ends: its engine, its connections, its layout */
	pthread_mutex_lock(&px->mu);
	px->aborting = true;
	pthread_mutex_unlock(&px->mu);
	if (px->thr_started)
		wk_engine_join(px);
	for (uint32_t r = 0; r < px->n; r++) {
		if (px->gone && px->gone[r])
			continue;
		if (r == px->rank)
			me = n;
		px->cfg.peers[n++] = px->cfg.peers[r];
	}
	wk_free_net(px);
	keep_tensors(px);
	if (lost_box) { /* rank 0 knows which: the others leave the boxes to it */
		struct cfg_hostports *l = &px->cfg.box.control;
		uint32_t kept = 0, off = 0;

		for (uint32_t i = 0; i < l->n; i++) {
			bool g = false;

			for (uint32_t b = 0; b < px->n_boxes; b++)
				g |= px->box[b].gone && px->box[b].addr.ip_be == l->hp[i].ip_be &&
				     px->box[b].addr.port == l->hp[i].port;
			if (!g) {
				l->hp[kept++] = l->hp[i];
			} else if (off < sizeof(box)) {
				char ip[INET_ADDRSTRLEN];

				off += (size_t)snprintf(
					box + off, sizeof(box) - off, "%s%s:%u", off ? ", " : "",
					wk_ipstr(l->hp[i].ip_be, ip), l->hp[i].port);
			}
		}
		l->n = kept;
	}
	first_job = px->cfg.job.id; /* configured, or drawn by the rendezvous */
	px->epoch++;
	px->job = epoch_job(first_job, px->epoch);
	px->n = px->cfg.worker.world_size = n;
	px->rank = px->cfg.worker.rank = me;
	px->udp = px->efd = -1;
	px->n_boxes = 0;
	px->tp = NULL;
	px->dp = NULL;
	px->unit = NULL;
	/* nothing of the old incarnation's counters and state carries over */
	px->n_eps = px->n_units = px->self_unit = px->n_chunks = px->n_frags = 0;
	px->chunk_unit = px->chunk_local = NULL;
	px->total_bytes = 0;
	px->n_new = px->cap_new = px->announced = px->applied = 0;
	px->newt = NULL;
	px->ag = NULL;
	px->ag_rows = px->ag_cap = px->probed = px->segments = 0;
	px->ag_last_ns = px->calls = 0;
	px->probe_on = false;
	memset(px->hist, 0, sizeof(px->hist));
	px->peer_fd = NULL;
	px->peer_buf = NULL;
	px->peer_len = NULL;
	px->peer_bye = NULL;
	px->peer_heard = NULL;
	px->hb_sent_ns = 0;
	px->ss_pub = NULL;
	px->subq = px->subq_tail = NULL;
	px->aborting = false;
	px->fail = 0;
	px->fail_msg[0] = 0;
	px->fail_from = UINT32_MAX;
	px->fail_told = false;
	memset(&px->st_pub, 0, sizeof(px->st_pub));
	memset(&px->frag, 0, sizeof(*px) - offsetof(struct pbox, frag)); /* engine only */
	if (box[0])
		wk_log(px, CFG_LOG_WARNING,
		       "the box at %s is gone: the job goes on without it, its chunks on %s; "
		       "the next start uses it again",
		       box,
		       px->cfg.box.control.n ? "the other boxes and the workers' SS_GPUs"
					     : "the workers' SS_GPUs (k = 0)");
	wk_log(px, CFG_LOG_INFO, "shrink: incarnation %u of job %u, %u ranks, job id %u at the box",
	       px->epoch, first_job, n, px->job);
	rc = wk_boot(px);
	if (rc == PBOX_OK)
		rc = wk_engine_start(px);
	if (rc) {
		/* the context is failed with this; pbox_finalize() frees it */
		pthread_mutex_lock(&px->mu);
		px->fail = rc;
		snprintf(px->fail_msg, sizeof(px->fail_msg), "%s", pbox_last_error());
		pthread_mutex_unlock(&px->mu);
	}
	return rc;
}
