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
 * named as one that never reached rank 0 (or rank 0 as one that could not
 * be reached), and recorded as gone: another pbox_shrink() goes on
 * without it.
 */
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_resume.h"
#include "wk_fail.h"
#include "wk_link.h"
#include "wk_engine.h"
#include "wk_local_renew.h"
#include "wk_local.h"
#include "wk_boot.h"
#include "wk_box.h"
#include "wk_pbox.h"
#include "wk_survive.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Incarnation @epoch's job id at the box: never 0, never the first's. */
static uint32_t epoch_job(uint32_t job, uint32_t epoch)
{
	uint64_t z = wk_mix64(((uint64_t)job << 32 | epoch) + 0x9e3779b97f4a7c15ull);

	return (uint32_t)z ? (uint32_t)z : 1;
}

static bool listed(uint64_t key, const uint64_t *keys, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (keys[i] == key)
			return true;
	return false;
}

/* Whether @t was declared after the start and is not yet agreed: rank 0
 * may have grown it and the others not yet read its GREW. */
static bool declared_unagreed(const struct wk_tensor *t)
{
	return !t->ready && t->late && t->call == UINT64_MAX;
}

/* Keep the tensors every rank laid out, as declared ones, but the @n
 * @drop; drop the rest, and the sharded collectives' pieces (rooted at
 * ranks of the old world: new tensors again on their next use, agreed with
 * their roots anew). @declared: the ranks end together at one call of
 * their programs (pbox_forget(), pbox_rejoin()), so every rank has
 * declared the same tensors, agreed or not yet: those declared since the
 * last agreement are kept too, as every rank holds them, where readiness
 * differs from rank to rank until GREW has reached them all. */
static void keep_tensors(struct pbox *px, const uint64_t *drop, uint32_t n, bool declared)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < px->n_t; i++) {
		struct wk_tensor *t = px->t[i];

		if (!(t->ready || (declared && declared_unagreed(t))) || t->kind != WK_ALLREDUCE ||
		    listed(t->key, drop, n)) {
			wk_tensor_free(t);
			continue;
		}
		/* the wire slots are this incarnation's layout's; the error
		 * feedback is the tensor's, and goes on, as does how it is
		 * summed (":gather") */
		wk_tensor_unwire(t);
		*t = (struct wk_tensor){.key = t->key,
					.count = t->count,
					.bytes = t->bytes,
					.prio = t->prio,
					.dtype = t->dtype,
					.comp = t->comp,
					.rcomp = t->rcomp,
					.held = t->held,
					.gather = t->gather,
					.resid = t->resid};
		px->t[kept++] = t;
	}
	px->n_t = kept;
}

/* ---- resuming what the box's loss interrupted ----------------------------- */

static void rs_free(struct wk_rs_rank *rk)
{
	for (uint32_t i = 0; i < rk->n; i++)
		free(rk->e[i].run);
	free(rk->e);
	rk->e = NULL;
	rk->n = 0;
}

/* This rank's own account, over the tensors kept (@next: their rounds). */
static int rs_own(const struct pbox *px, const uint32_t *next, struct wk_rs_rank *rk)
{
	rk->broken = px->res_broken;
	rk->pieces = px->res_pieces;
	rk->e = calloc(px->n_t + 1, sizeof(*rk->e));
	if (!rk->e)
		return -1;
	for (uint32_t i = 0; i < px->n_t; i++) {
		struct wk_rs_ent *e = &rk->e[rk->n++];

		*e = (struct wk_rs_ent){.key = px->t[i]->key, .next = next[i], .op = -1};
		for (uint32_t j = 0; j < px->n_res; j++) {
			if (px->res[j].key != e->key)
				continue;
			e->op = px->res[j].round;
			e->n_run = px->res[j].n_run;
			e->run = malloc(2 * (e->n_run + 1) * sizeof(*e->run));
			if (!e->run)
				return -1;
			memcpy(e->run, px->res[j].run, 2 * e->n_run * sizeof(*e->run));
		}
	}
	return 0;
}

static int rs_send(int fd, const struct wk_rs_rank *rk)
{
	int rc = RP_SEND(fd, RESUME, resume, .entries = rk->n, .broken = rk->broken,
			 .pieces = rk->pieces);

	for (uint32_t i = 0; rc == 0 && i < rk->n; i++) {
		const struct wk_rs_ent *e = &rk->e[i];

		rc = RP_SEND(fd, R, r, .key = e->key, .next = e->next, .op = e->op,
			     .runs = e->n_run);
		for (uint32_t j = 0; rc == 0 && j < e->n_run; j++)
			rc = RP_SEND(fd, D, d, .from = e->run[2 * j], .to = e->run[2 * j + 1]);
	}
	return rc ? rc : rp_send_verb(fd, RP_END);
}

/* The next line from rank @r's connection by @deadline into @line, read as
 * a @want into @m: 0, or -1 with @line saying what came instead ("" when
 * nothing did). */
static int rs_next(struct pbox *px, uint32_t r, uint64_t deadline, enum rp_verb want,
		   struct rp_msg *m, char *line, size_t cap)
{
	char err[160];

	if (wk_line_wait(px->net.peer_fd[r], px->net.peer_buf[r], &px->net.peer_len[r], WK_LINEBUF,
			 line, cap, deadline) != 1) {
		line[0] = '\0';
		return -1;
	}
	if (rp_expect(line, want, m, err, sizeof(err))) {
		snprintf(line, cap, "%s", err);
		return -1;
	}
	return 0;
}

/* Rank @r's account from its connection; 0, or -1 with @why. */
static int rs_read(struct pbox *px, uint32_t r, uint64_t deadline, struct wk_rs_rank *rk, char *why,
		   size_t cap)
{
	char line[RP_LINE_MAX];
	struct rp_msg m;
	uint32_t n;

	if (rs_next(px, r, deadline, RP_RESUME, &m, line, sizeof(line)) ||
	    m.resume.entries > px->n_t || m.resume.broken >= WK_RS_BROKEN_COUNT) {
		snprintf(why, cap, "sent '%.80s' for its account of the push-pulls in flight",
			 line);
		return -1;
	}
	n = m.resume.entries;
	rk->broken = (uint8_t)m.resume.broken;
	rk->pieces = m.resume.pieces;
	rk->e = calloc(n + 1, sizeof(*rk->e));
	if (!rk->e) {
		snprintf(why, cap, "out of memory");
		return -1;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct wk_rs_ent *e = &rk->e[rk->n++];
		uint64_t prev = 0;

		if (rs_next(px, r, deadline, RP_R, &m, line, sizeof(line)) || m.r.op < -1 ||
		    m.r.op > UINT32_MAX || m.r.runs > (1u << 24)) {
			snprintf(why, cap, "sent a bad tensor line ('%.80s')", line);
			return -1;
		}
		*e = (struct wk_rs_ent){
			.key = m.r.key, .next = m.r.next, .op = m.r.op, .n_run = m.r.runs};
		e->run = malloc(2 * (e->n_run + 1) * sizeof(*e->run));
		if (!e->run) {
			snprintf(why, cap, "out of memory");
			return -1;
		}
		for (uint32_t j = 0; j < e->n_run; j++) {
			uint64_t *ab = &e->run[2 * j];

			if (rs_next(px, r, deadline, RP_D, &m, line, sizeof(line)) ||
			    m.d.from < prev || m.d.to <= m.d.from) {
				snprintf(why, cap,
					 "sent a bad range ('%.80s') of tensor key %" PRIu64, line,
					 e->key);
				return -1;
			}
			ab[0] = m.d.from;
			ab[1] = prev = m.d.to;
		}
	}
	if (rs_next(px, r, deadline, RP_END, &m, line, sizeof(line))) {
		snprintf(why, cap, "cut its account of the push-pulls in flight short ('%.80s')",
			 line);
		return -1;
	}
	return 0;
}

static int ent_cmp(const void *k, const void *e)
{
	uint64_t a = *(const uint64_t *)k, b = ((const struct wk_rs_ent *)e)->key;

	return a < b ? -1 : a > b;
}

const struct wk_rs_ent *wk_rs_find(const struct wk_rs_rank *rk, uint64_t key)
{
	return bsearch(&key, rk->e, rk->n, sizeof(*rk->e), ent_cmp);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Rank 0: how to resume tensor @key of @bytes, interrupted on some rank,
 * from every survivor's account. Every rank either has the push-pull of
 * round @op interrupted (with some ranges summed), or has not pushed it yet
 * (then nothing of it is summed anywhere), or had it complete (then every
 * byte must be a sum on an interrupted rank: it went on). Each range summed
 * somewhere is given by the lowest rank that holds its sum; everything else
 * is summed again from every rank's input. 0, or -1 with @why.
 */
/* What wk_resume_plan() learns of a tensor from the accounts. */
struct plan_scan {
	uint32_t tot;	  /* boundaries of summed ranges, and the tensor's two */
	uint32_t went_on; /* the lowest rank that had it complete, or UINT32_MAX */
	bool fresh;	  /* some rank never pushed the round */
	bool summed;	  /* some range of it is summed on an interrupted rank */
};

/* The interrupted ranks: all at one round of @key, into @pl->op (-1: none). */
static int plan_round(uint64_t key, uint64_t bytes, const struct wk_rs_rank *rk, uint32_t n,
		      struct wk_rs_plan *pl, struct plan_scan *sc, char *why, size_t cap)
{
	pl->op = -1;
	for (uint32_t r = 0; r < n; r++) {
		const struct wk_rs_ent *e = wk_rs_find(&rk[r], key);

		if (!e) {
			snprintf(why, cap, "rank %u has no tensor key %" PRIu64, r, key);
			return -1;
		}
		if (e->op < 0)
			continue;
		if (pl->op >= 0 && e->op != pl->op) {
			snprintf(why, cap,
				 "tensor key %" PRIu64 ": ranks were at rounds %" PRId64
				 " and %" PRId64 " of it",
				 key, pl->op, e->op);
			return -1;
		}
		pl->op = e->op;
		sc->summed |= e->n_run > 0;
		sc->tot += 2 * e->n_run;
		if (e->n_run && e->run[2 * e->n_run - 1] > bytes) {
			snprintf(why, cap, "rank %u: tensor key %" PRIu64 " has %" PRIu64 " bytes",
				 r, key, bytes);
			return -1;
		}
	}
	return 0;
}

/* The ranks not interrupted: each went on (had round op complete) or never
 * pushed it, and not both kinds at once. */
static int plan_others(uint64_t key, const struct wk_rs_rank *rk, uint32_t n,
		       const struct wk_rs_plan *pl, struct plan_scan *sc, char *why, size_t cap)
{
	for (uint32_t r = 0; r < n; r++) {
		const struct wk_rs_ent *e = wk_rs_find(&rk[r], key);

		if (e->op >= 0)
			continue;
		if (e->next == pl->op + 1) {
			sc->went_on = sc->went_on < r ? sc->went_on : r;
		} else if (e->next == pl->op) {
			sc->fresh = true;
		} else {
			snprintf(why, cap,
				 "tensor key %" PRIu64 ": rank %u is at round %u of it, "
				 "another was interrupted in round %" PRId64,
				 key, r, e->next, pl->op);
			return -1;
		}
	}
	if (sc->fresh && (sc->summed || sc->went_on != UINT32_MAX)) {
		snprintf(why, cap,
			 "tensor key %" PRIu64 ": a rank never pushed round %" PRId64
			 " of it, yet it is summed elsewhere",
			 key, pl->op);
		return -1;
	}
	return 0;
}

/* The lowest interrupted rank holding the sum of byte @x (@p: each rank's
 * cursor in its ranges, moved on), or UINT32_MAX. */
static uint32_t owner_of(uint64_t key, uint64_t x, const struct wk_rs_rank *rk, uint32_t n,
			 uint32_t *p)
{
	for (uint32_t r = 0; r < n; r++) {
		const struct wk_rs_ent *e = wk_rs_find(&rk[r], key);

		if (e->op < 0)
			continue;
		while (p[r] < e->n_run && e->run[2 * p[r] + 1] <= x)
			p[r]++;
		if (p[r] < e->n_run && e->run[2 * p[r]] <= x)
			return r;
	}
	return UINT32_MAX;
}

/* Each range between two boundaries to its owner, into @pl->own. */
static int plan_owners(uint64_t key, uint64_t bytes, const struct wk_rs_rank *rk, uint32_t n,
		       struct wk_rs_plan *pl, const struct plan_scan *sc, char *why, size_t cap)
{
	uint32_t nb = 0, *p = calloc(n, sizeof(*p));
	uint64_t *bnd = malloc(sc->tot * sizeof(*bnd));
	int rc = -1;

	if (!p || !bnd) {
		snprintf(why, cap, "out of memory");
		goto out;
	}
	bnd[nb++] = 0;
	bnd[nb++] = bytes;
	for (uint32_t r = 0; r < n; r++) {
		const struct wk_rs_ent *e = wk_rs_find(&rk[r], key);

		for (uint32_t j = 0; e->op >= 0 && j < 2 * e->n_run; j++)
			bnd[nb++] = e->run[j];
	}
	qsort(bnd, nb, sizeof(*bnd), u64_cmp);
	for (uint32_t i = 0; i + 1 < nb; i++) {
		uint64_t x = bnd[i], y = bnd[i + 1], v[3];
		uint32_t owner = x == y ? UINT32_MAX : owner_of(key, x, rk, n, p);

		if (x != y && owner == UINT32_MAX && sc->went_on != UINT32_MAX) {
			snprintf(why, cap,
				 "tensor key %" PRIu64 ": rank %u had the sum of round "
				 "%" PRId64 " and went on, but bytes [%" PRIu64 ", %" PRIu64
				 ") of it are a sum on no rank that did not",
				 key, sc->went_on, pl->op, x, y);
			goto out;
		}
		if (owner == UINT32_MAX)
			continue;
		if (pl->n_own && pl->own[3 * pl->n_own - 1] == owner &&
		    pl->own[3 * pl->n_own - 2] == x) {
			pl->own[3 * pl->n_own - 2] = y;
			continue;
		}
		v[0] = x;
		v[1] = y;
		v[2] = owner;
		if (wk_run_add(&pl->own, &pl->n_own, &pl->cap, 3, v)) {
			snprintf(why, cap, "out of memory");
			goto out;
		}
	}
	rc = 0;
out:
	free(p);
	free(bnd);
	return rc;
}

int wk_resume_plan(uint64_t key, uint64_t bytes, const struct wk_rs_rank *rk, uint32_t n,
		   struct wk_rs_plan *pl, char *why, size_t cap)
{
	struct plan_scan sc = {.tot = 2, .went_on = UINT32_MAX};

	if (plan_round(key, bytes, rk, n, pl, &sc, why, cap) ||
	    plan_others(key, rk, n, pl, &sc, why, cap))
		return -1;
	if (!sc.summed && sc.went_on == UINT32_MAX) /* nothing summed: pushed again, from inputs */
		return 0;
	return plan_owners(key, bytes, rk, n, pl, &sc, why, cap);
}

static void plans_free(struct wk_rs_plan *pl, uint32_t n)
{
	for (uint32_t i = 0; pl && i < n; i++)
		free(pl[i].own);
	free(pl);
}

/* Whether every survivor can resume (0), from their accounts; else -1 and
 * @why names the first rank that cannot, and why. Sharded collectives are
 * never resumed (their pieces are dropped): a rank with one in flight, or
 * ranks that had submitted different numbers of pieces (one had a
 * collective's result and went on, another had not yet called it), redo
 * the step, so that every rank calls the same collectives again. */
int wk_rs_resumable(const struct wk_rs_rank *rk, uint32_t n, char *why, size_t cap)
{
	static const char *const broken[WK_RS_BROKEN_COUNT] = {
		[WK_RS_CUDA] = "pushes CUDA tensors (their sums so far are in GPU memory)",
		[WK_RS_NOMEM] = "ran out of memory recording them",
		[WK_RS_PIECES] = "had a sharded collective in flight",
	};

	for (uint32_t r = 0; r < n; r++) {
		if (rk[r].broken) {
			snprintf(why, cap, "rank %u %s", r, broken[rk[r].broken]);
			return -1;
		}
		if (rk[r].pieces != rk[0].pieces) {
			snprintf(why, cap,
				 "rank %u had submitted %" PRIu64 " pieces of sharded "
				 "collectives, rank 0 %" PRIu64 ": they were at different "
				 "collectives",
				 r, rk[r].pieces, rk[0].pieces);
			return -1;
		}
	}
	return 0;
}

/* Rank 0: every survivor's account, and the plans; 0, or -1 with @why. */
static int rs_root(struct pbox *px, const uint32_t *next, uint64_t deadline,
		   struct wk_rs_plan **out, uint32_t *n_out, char *why, size_t cap)
{
	struct wk_rs_rank *rk = calloc(px->net.n, sizeof(*rk));
	struct wk_rs_plan *pl = NULL;
	uint32_t n_pl = 0;
	int rc = -1;

	if (!rk || rs_own(px, next, &rk[0])) {
		snprintf(why, cap, "rank 0 is out of memory");
		goto out;
	}
	for (uint32_t r = 1; r < px->net.n; r++) {
		char w[200];

		if (rs_read(px, r, deadline, &rk[r], w, sizeof(w))) {
			snprintf(why, cap, "rank %u %s", r, w);
			goto out;
		}
	}
	if (wk_rs_resumable(rk, px->net.n, why, cap))
		goto out;
	pl = calloc(px->n_t + 1, sizeof(*pl));
	if (!pl) {
		snprintf(why, cap, "rank 0 is out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < px->n_t; i++) {
		bool hit = false;

		for (uint32_t r = 0; r < px->net.n && !hit; r++) {
			const struct wk_rs_ent *e = wk_rs_find(&rk[r], px->t[i]->key);

			hit = e && e->op >= 0;
		}
		if (!hit)
			continue;
		pl[n_pl].key = px->t[i]->key;
		if (wk_resume_plan(px->t[i]->key, px->t[i]->bytes, rk, px->net.n, &pl[n_pl++], why,
				   cap))
			goto out;
	}
	rc = 0;
out:
	for (uint32_t r = 0; rk && r < px->net.n; r++)
		rs_free(&rk[r]);
	free(rk);
	if (rc) {
		plans_free(pl, n_pl);
		pl = NULL;
		n_pl = 0;
	}
	*out = pl;
	*n_out = n_pl;
	return rc;
}

/* The others: this rank's account to rank 0, and the plans back; 0, -1 with
 * @why where rank 0 decided against resuming (or could not be heard). */
static int rs_rank(struct pbox *px, const uint32_t *next, uint64_t deadline,
		   struct wk_rs_plan **out, uint32_t *n_out, char *why, size_t cap)
{
	struct wk_rs_rank me = {0};
	struct wk_rs_plan *pl = NULL;
	uint32_t n = 0, k = 0;
	char line[RP_LINE_MAX] = "", err[160];
	struct rp_msg m;
	int rc = -1;

	if (rs_own(px, next, &me) || rs_send(px->net.peer_fd[0], &me)) {
		snprintf(why, cap, "this rank could not tell rank 0 its push-pulls in flight");
		goto out;
	}
	if (wk_line_wait(px->net.peer_fd[0], px->net.peer_buf[0], &px->net.peer_len[0], WK_LINEBUF,
			 line, sizeof(line), deadline) != 1) {
		snprintf(why, cap, "no word from rank 0 on them");
		goto out;
	}
	if (rp_parse(line, &m, err, sizeof(err))) {
		snprintf(why, cap, "rank 0 sent a line this rank cannot read: %s", err);
		goto out;
	}
	if (m.verb == RP_REDO) {
		snprintf(why, cap, "rank 0 says: %s", m.redo.why);
		goto out;
	}
	if (m.verb != RP_PLAN || m.plan.keys > px->n_t ||
	    !(pl = calloc(m.plan.keys + 1, sizeof(*pl)))) {
		snprintf(why, cap, "rank 0 sent %s for its plan", rp_verb_name(m.verb));
		goto out;
	}
	n = m.plan.keys;
	for (k = 0; k < n; k++) {
		struct wk_rs_plan *p = &pl[k];
		uint32_t n_own;

		if (rs_next(px, 0, deadline, RP_P, &m, line, sizeof(line)) ||
		    m.p.owned > (1u << 24))
			break;
		p->key = m.p.key;
		p->op = m.p.op;
		n_own = m.p.owned;
		for (uint32_t j = 0; j < n_own; j++) {
			uint64_t v[3];

			if (rs_next(px, 0, deadline, RP_O, &m, line, sizeof(line)))
				break;
			v[0] = m.o.from;
			v[1] = m.o.to;
			v[2] = m.o.rank;
			if (v[1] <= v[0] || v[2] >= px->net.n ||
			    wk_run_add(&p->own, &p->n_own, &p->cap, 3, v))
				break;
		}
		if (p->n_own != n_own)
			break;
	}
	if (k < n || rs_next(px, 0, deadline, RP_END, &m, line, sizeof(line))) {
		snprintf(why, cap, "rank 0 sent a bad plan ('%.80s')", line);
		goto out;
	}
	rc = 0;
out:
	rs_free(&me);
	if (rc) {
		plans_free(pl, k + (pl != NULL));
		pl = NULL;
		n = 0;
	}
	*out = pl;
	*n_out = n;
	return rc;
}

/* Rank 0: the plans (@rc 0) or why not (REDO) to every other rank. */
static void rs_tell(struct pbox *px, int rc, const char *why, const struct wk_rs_plan *pl,
		    uint32_t n_pl)
{
	for (uint32_t r = 1; r < px->net.n; r++) {
		if (rc) {
			RP_SEND(px->net.peer_fd[r], REDO, redo, .why = why);
			continue;
		}
		RP_SEND(px->net.peer_fd[r], PLAN, plan, .keys = n_pl);
		for (uint32_t k = 0; k < n_pl; k++) {
			const uint64_t *o = pl[k].own;

			RP_SEND(px->net.peer_fd[r], P, p, .key = pl[k].key, .op = pl[k].op,
				.owned = pl[k].n_own);
			for (uint32_t j = 0; j < pl[k].n_own; j++, o += 3)
				RP_SEND(px->net.peer_fd[r], O, o, .from = o[0], .to = o[1],
					.rank = o[2]);
		}
		rp_send_verb(px->net.peer_fd[r], RP_END);
	}
}

/* Each plan to its tensor: an interrupted one of ours takes it (its next
 * push-pull resumes it); one ours had complete gets zeros (into @zero). */
static void rs_apply(struct pbox *px, const uint32_t *next, struct wk_rs_plan *pl, uint32_t n_pl,
		     uint32_t *zero, uint32_t *n_zero)
{
	for (uint32_t k = 0; k < n_pl; k++) {
		uint32_t i, j;

		for (j = 0; j < px->n_res && px->res[j].key != pl[k].key; j++)
			;
		if (j < px->n_res) {
			px->res[j].own = pl[k].own;
			px->res[j].n_own = pl[k].n_own;
			pl[k].own = NULL;
			continue;
		}
		for (i = 0; i < px->n_t && px->t[i]->key != pl[k].key; i++)
			;
		if (i < px->n_t && next[i] == pl[k].op + 1)
			zero[(*n_zero)++] = i;
	}
}

/* What the resume keeps and sums again, in the log. */
static void rs_report(const struct pbox *px, uint32_t n_pl, uint32_t n_zero)
{
	uint64_t kept = 0, again = 0;

	for (uint32_t j = 0; j < px->n_res; j++) {
		uint64_t k = 0;

		for (uint32_t i = 0; i < px->res[j].n_own; i++)
			k += px->res[j].own[3 * i + 1] - px->res[j].own[3 * i];
		kept += k;
		again += px->res[j].bytes - k;
	}
	wk_log(px, CFG_LOG_WARNING,
	       "the box's loss interrupted %u push-pulls here (%u tensors in the job): they "
	       "resume as they are pushed again, %.2f MiB of them already sums, %.2f MiB "
	       "summed again; %u tensors done here and not elsewhere get zeros from this "
	       "rank",
	       px->n_res, n_pl, (double)kept / 1048576, (double)again / 1048576, n_zero);
}

/*
 * After the new incarnation's bootstrap, before its engine: the survivors
 * agree how the push-pulls the box's loss interrupted go on. Each resumed
 * one keeps its record, with its plan (its next push-pull applies it); a
 * tensor this rank had complete and went on from gets a push-pull of zeros
 * from pbox_shrink() itself (@zero). 0: resumed; 1: not (the caller redoes
 * the step; why is logged).
 */
static int rs_agree(struct pbox *px, const uint32_t *next, uint32_t **zero, uint32_t *n_zero)
{
	uint64_t deadline = wk_now() + px->cfg.tuning.deadline_us * 1000;
	struct wk_rs_plan *pl = NULL;
	uint32_t n_pl = 0;
	char why[WK_ERR_LEN] = "";
	int rc;

	*zero = NULL;
	*n_zero = 0;
	if (px->net.rank == 0) {
		rc = rs_root(px, next, deadline, &pl, &n_pl, why, sizeof(why));
		rs_tell(px, rc, why, pl, n_pl);
	} else {
		rc = rs_rank(px, next, deadline, &pl, &n_pl, why, sizeof(why));
	}
	if (rc == 0 && !(*zero = calloc(n_pl + 1, sizeof(**zero))))
		rc = -1, snprintf(why, sizeof(why), "out of memory");
	if (rc == 0)
		rs_apply(px, next, pl, n_pl, *zero, n_zero);
	plans_free(pl, n_pl);
	if (rc) {
		free(*zero);
		*zero = NULL;
		*n_zero = 0;
		wk_resume_free(px);
		wk_log(px, CFG_LOG_WARNING,
		       "the push-pulls the box's loss interrupted are not resumed (%s): redo the "
		       "step from its inputs",
		       why);
		return 1;
	}
	px->res_ok = true;
	if (n_pl)
		rs_report(px, n_pl, *n_zero);
	return 0;
}

/* A tensor this rank had complete as the box went, resumed elsewhere: its
 * push-pull of zeros (the ranks that hold the sum give it). */
static int give_zeros(struct pbox *px, const uint32_t *idx, uint32_t n)
{
	struct pbox_handle **op = calloc(n, sizeof(*op));
	void **buf = calloc(n, sizeof(*buf));
	int rc = op && buf ? PBOX_OK : wk_err(PBOX_ENOMEM, "pbox_shrink: out of memory");

	for (uint32_t i = 0; rc == PBOX_OK && i < n; i++) {
		const struct wk_tensor *t = px->t[idx[i]];

		if (!(buf[i] = calloc(1, t->bytes)))
			rc = wk_err(PBOX_ENOMEM, "pbox_shrink: out of memory");
		else
			rc = wk_submit(px, t->key, buf[i], buf[i], t->count,
				       (enum pbox_dtype)t->dtype, &op[i]);
	}
	for (uint32_t i = 0; op && i < n; i++) {
		int st = op[i] ? pbox_wait(op[i]) : PBOX_OK;

		rc = rc ? rc : st;
		if (buf)
			free(buf[i]);
	}
	free(op);
	free(buf);
	return rc;
}

/* What pbox_rejoin() and pbox_forget() find in flight (@fn names it in
 * the error): PBOX_OK where nothing is and the context has not failed. */
static int idle_now(struct pbox *px, const char *fn, bool *stores)
{
	uint32_t busy = 0, async = 0;
	char why[WK_ERR_LEN];
	int rc;

	pthread_mutex_lock(&px->mu);
	rc = px->fail;
	snprintf(why, sizeof(why), "%s", px->fail_msg);
	for (uint32_t i = 0; i < px->n_t; i++) {
		busy += px->t[i]->busy != NULL;
		async += px->t[i]->kind == WK_ASYNC;
	}
	pthread_mutex_unlock(&px->mu);
	if (stores)
		*stores = async > 0;
	if (rc)
		return wk_err(PBOX_ESTATE, "%s: the context failed (%s): pbox_shrink() first", fn,
			      why);
	if (busy)
		return wk_err(PBOX_ESTATE, "%s: push-pulls are in flight", fn);
	return PBOX_OK;
}

/* This incarnation ends: its engine stops at once. */
static void stop_engine(struct pbox *px)
{
	pthread_mutex_lock(&px->mu);
	px->aborting = true;
	pthread_mutex_unlock(&px->mu);
	wk_engine_kick(px); /* not at its next timeout */
	if (px->thr_started)
		wk_engine_join(px);
}

/* The next incarnation, closed, of @n ranks with this one @me (the old one
 * closed by wk_free_net()), and the context's state between threads as a
 * new incarnation finds it. */
static void renew(struct pbox *px, uint32_t n, uint32_t me)
{
	px->epoch++;
	px->cfg.worker.world_size = n;
	px->cfg.worker.rank = me;
	/* the job id: configured, or the rendezvous' */
	wk_net_reset(px, me, n, epoch_job(px->cfg.job.id, px->epoch));
	wk_set_key(px, 0); /* until the bootstrap mixes in rank 0's nonce */
	px->subq = px->subq_tail = NULL;
	px->aborting = false;
	wk_fail_reset(px);
	px->rejoin_req = px->rejoin_sent = false;
	px->rejoins = 0;
	memset(&px->st_pub, 0, sizeof(px->st_pub));
}

/* A failed bootstrap of the new incarnation fails the context with it
 * (pbox_finalize() frees it). */
static int failed_with(struct pbox *px, int rc)
{
	wk_raise(px, WK_FK_LOCAL, rc, 0, "%s", pbox_last_error());
	return rc;
}

/* What pbox_shrink() and pbox_rejoin() (@fn) both need: a started context
 * (with local aggregation, of a machine still in the job). */
static int can_renew(struct pbox *px, const char *fn, bool idle)
{
	uint32_t jobs;

	if (!px)
		return wk_err(PBOX_EINVAL, "%s: context is NULL", fn);
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "%s: the context is not started", fn);
	pthread_mutex_lock(&px->mu);
	jobs = px->cuda_jobs;
	pthread_mutex_unlock(&px->mu);
	/* staged CUDA push-pulls: their pieces may not all be submitted yet */
	if (idle && jobs)
		return wk_err(
			PBOX_ESTATE,
			"%s: push-pulls are in flight (%u of CUDA tensors not yet waited for)", fn,
			jobs);
	return px->loc ? wk_local_can_renew(px, fn, idle) : PBOX_OK;
}

/* The failure that calls for a shrink: pbox_shrink() may be called on a
 * failure seen elsewhere first (another library's collective on the same
 * ranks), and a lost rank or box is known here within a heartbeat. Its
 * code (0: none), its message in @why. */
static int wait_failure(struct pbox *px, char *why, size_t cap)
{
	for (uint64_t until = wk_now() + px->cfg.tuning.heartbeat_us * 1000 + 500000000ull;;) {
		int rc;

		pthread_mutex_lock(&px->mu);
		rc = px->fail;
		snprintf(why, cap, "%s", px->fail_msg);
		pthread_mutex_unlock(&px->mu);
		if (rc || wk_now() >= until)
			return rc;
		usleep(10000);
	}
}

/* The surviving ranks' peers, in order, into [peers]: how many; @me: this
 * rank's new rank; @gm (when not NULL): the ranks gone, in order. */
static uint32_t survivors(struct pbox *px, uint32_t *gm, uint32_t *me)
{
	uint32_t n = 0;

	for (uint32_t r = 0, g = 0; r < px->net.n; r++) {
		if (px->net.gone && px->net.gone[r]) {
			if (gm)
				gm[g++] = r;
			continue;
		}
		if (r == px->net.rank)
			*me = n;
		px->cfg.peers[n++] = px->cfg.peers[r];
	}
	return n;
}

/* The boxes lost out of [box] control (rank 0 knows which: the others
 * leave the boxes to it), named in @box. */
static void drop_lost_boxes(struct pbox *px, char *box, size_t cap)
{
	struct cfg_hostports *l = &px->cfg.box.control;
	uint32_t kept = 0, off = 0;

	if (!px->boxes_all.n) /* for pbox_rejoin(), on every rank */
		px->boxes_all = *l;
	for (uint32_t i = 0; i < l->n; i++) {
		bool g = false;

		for (uint32_t b = 0; b < px->net.n_boxes; b++)
			g |= px->net.box[b].gone && px->net.box[b].addr.ip_be == l->hp[i].ip_be &&
			     px->net.box[b].addr.port == l->hp[i].port;
		if (!g) {
			l->hp[kept++] = l->hp[i];
		} else if (off < cap) {
			char ip[INET_ADDRSTRLEN];

			off += (size_t)snprintf(box + off, cap - off, "%s%s:%u", off ? ", " : "",
						wk_ipstr(l->hp[i].ip_be, ip), l->hp[i].port);
		}
	}
	l->n = kept;
}

/* Each ready tensor's next round, in order (what the resume is about);
 * NULL when out of memory. */
static uint32_t *next_rounds(const struct pbox *px)
{
	uint32_t *next = calloc(px->n_t + 1, sizeof(*next));

	for (uint32_t i = 0, k = 0; next && i < px->n_t; i++)
		if (px->t[i]->ready)
			next[k++] = px->t[i]->round;
	return next;
}

/* The new incarnation up: bootstrap, the resume agreed (@resume), the
 * engine, the zeros given; PBOX_OK, PBOX_REDO, or a failure code. */
static int restart(struct pbox *px, bool resume, const uint32_t *next)
{
	uint32_t *zero = NULL, n_zero = 0;
	int rc = wk_boot(px), redo = 1;

	if (rc == PBOX_OK && resume)
		redo = rs_agree(px, next, &zero, &n_zero);
	if (rc == PBOX_OK)
		rc = wk_engine_start(px);
	if (rc == PBOX_OK && n_zero)
		rc = give_zeros(px, zero, n_zero);
	free(zero);
	return rc ? rc : redo ? PBOX_REDO : PBOX_OK;
}

int pbox_shrink(struct pbox *px)
{
	uint32_t n, me = UINT32_MAX, gone = 0, *gm = NULL, *next;
	char why[WK_ERR_LEN], box[192] = "";
	bool lost_box, resume;
	int rc;

	if ((rc = can_renew(px, "pbox_shrink", false)))
		return rc;
	if (wk_local_led(px)) /* the machine's leader renews it */
		return wk_local_follow_renew(px, "pbox_shrink", true);
	rc = wait_failure(px, why, sizeof(why));
	for (uint32_t r = 0; px->net.gone && r < px->net.n; r++)
		gone += px->net.gone[r];
	lost_box = rc == PBOX_EBOX && px->cfg.box.control.n;
	if (!rc || (!gone && !lost_box))
		return wk_err(PBOX_ESTATE, "pbox_shrink: the job lost no rank and not its box%s%s",
			      rc ? ": " : "", rc ? why : "");
	if (px->loc) { /* its thread done with the network's handles; the machines gone */
		wk_local_quiet(px);
		gm = calloc(px->net.n, sizeof(*gm));
		if (!gm)
			return wk_err(PBOX_ENOMEM, "pbox_shrink: out of memory");
	}
	stop_engine(px);
	n = survivors(px, gm, &me);
	/* with every rank there, what the box's loss interrupted can go on
	 * (not the pieces of a machine's sums: the machine starts over) */
	resume = lost_box && !gone && !px->loc;
	if (!resume)
		wk_resume_free(px);
	next = next_rounds(px);
	if (!next) {
		free(gm);
		return wk_err(PBOX_ENOMEM, "pbox_shrink: out of memory");
	}
	wk_free_net(px);
	keep_tensors(px, NULL, 0, false);
	if (px->loc)
		wk_local_renet(px);
	if (lost_box)
		drop_lost_boxes(px, box, sizeof(box));
	renew(px, n, me);
	if (box[0])
		wk_log(px, CFG_LOG_WARNING,
		       "the box at %s is gone: the job goes on without it, its chunks on %s; "
		       "pbox_rejoin() or the next start takes it back",
		       box,
		       px->cfg.box.control.n ? "the other boxes and the workers' SS_GPUs"
					     : "the workers' SS_GPUs (k = 0)");
	wk_log(px, CFG_LOG_INFO, "shrink: incarnation %u of job %u, %u ranks, job id %u at the box",
	       px->epoch, px->cfg.job.id, n, px->net.job);
	rc = restart(px, resume, next);
	free(next);
	if (rc && rc != PBOX_REDO)
		failed_with(px, rc);
	if (px->loc) /* the machine follows; its ranks are told */
		wk_local_renew(px, rc == PBOX_REDO ? PBOX_OK : rc, gm, gone);
	free(gm);
	return rc;
}

/* pbox_shrink_step()'s agreement: libpbox's own key, one per world size
 * (a tensor's count is fixed), apart from ByteComp's and the pieces'
 * hashes; each rank's step in four 16-bit limbs, each exact in fp32. */
#define STEP_KEY   (WK_KEY_OWN | 0x57e9000000000000ull)
#define STEP_LIMBS 4u

int pbox_shrink_step(struct pbox *px, uint64_t *step)
{
	struct pbox_layout_info li;
	uint64_t min = UINT64_MAX;
	float *x;
	int rc;

	if (!step)
		return wk_err(PBOX_EINVAL, "pbox_shrink_step: step is NULL");
	rc = pbox_shrink(px);
	if (rc != PBOX_REDO) /* resumed (each rank goes on from its own), or failed */
		return rc;
	if ((rc = pbox_layout(px, &li)))
		return rc;
	/* a slot per rank, the others' zeros: the sum is every rank's step */
	x = calloc((size_t)li.world_size * STEP_LIMBS, sizeof(*x));
	if (!x)
		return wk_err(PBOX_ENOMEM, "pbox_shrink_step: out of memory");
	for (uint32_t l = 0; l < STEP_LIMBS; l++)
		x[li.rank * STEP_LIMBS + l] = (float)((*step >> (16 * l)) & 0xffff);
	rc = wk_own_sum(px, STEP_KEY + li.world_size, x, li.world_size * STEP_LIMBS);
	for (uint32_t r = 0; rc == PBOX_OK && r < li.world_size; r++) {
		uint64_t s = 0;

		for (uint32_t l = 0; l < STEP_LIMBS; l++) {
			float v = x[r * STEP_LIMBS + l];

			if (!(v >= 0 && v <= 65535) || v != (float)(uint32_t)v) {
				rc = wk_err(PBOX_EMISMATCH,
					    "pbox_shrink_step: rank %u's step came back as %g "
					    "in its limb %u (not an integer of 16 bits)",
					    r, (double)v, l);
				break;
			}
			s |= (uint64_t)v << (16 * l);
		}
		min = s < min ? s : min;
	}
	free(x);
	if (rc)
		return rc;
	if (min != *step)
		wk_log(px, CFG_LOG_WARNING,
		       "pbox_shrink_step: the survivors redo step %" PRIu64
		       " (this rank failed in step %" PRIu64 ")",
		       min, *step);
	*step = min;
	return PBOX_REDO;
}

/*
 * Before pbox_rejoin() ends this incarnation: each other rank says REJOIN
 * to rank 0 (its engine, on its connection), and rank 0 waits for every
 * one before it closes its connections, so that no rank still finishing
 * its last step sees rank 0 go and counts it lost. A rank that never says
 * it is waited for up to the deadline; the new bootstrap then names it.
 */
static bool rejoin_met(const struct pbox *px)
{
	return px->net.rank == 0 ? px->rejoins + 1 >= px->net.n : px->rejoin_sent;
}

static void rejoin_barrier(struct pbox *px)
{
	pthread_mutex_lock(&px->mu);
	px->rejoin_req = true;
	pthread_mutex_unlock(&px->mu);
	wk_engine_kick(px);
	wk_wait_cond(px, rejoin_met, wk_now() + px->net.es.deadline_ns);
}

/* The same ranks end this incarnation together (pbox_rejoin(),
 * pbox_forget()): every one there, the engine stopped, the boxes' state
 * let go (rank 0 unregisters, so that the budget is free for the next
 * registration), and the tensors kept but the @n @drop. */
static void end_together(struct pbox *px, const uint64_t *drop, uint32_t n)
{
	rejoin_barrier(px);
	stop_engine(px);
	wk_resume_free(px);
	if (px->net.rank == 0)
		wk_boxes_close(px, true);
	wk_free_net(px);
	keep_tensors(px, drop, n, true);
}

/* The next incarnation up (renew()ed): bootstrap and engine; a failure
 * fails the context. */
static int begin_again(struct pbox *px)
{
	int rc = wk_boot(px);

	if (rc == PBOX_OK)
		rc = wk_engine_start(px);
	if (rc)
		failed_with(px, rc);
	return rc;
}

/*
 * pbox_rejoin(): the boxes a shrink left out, back. The same ranks begin a
 * new incarnation with every box of [box] control; one that still does not
 * answer within a heartbeat is left out again (a warning names it).
 */
int pbox_rejoin(struct pbox *px)
{
	uint32_t was;
	int rc;

	if ((rc = can_renew(px, "pbox_rejoin", true)))
		return rc;
	if (wk_local_led(px)) /* the machine's leader renews it */
		return wk_local_follow_renew(px, "pbox_rejoin", false);
	if ((rc = idle_now(px, "pbox_rejoin", NULL)))
		return rc;
	if (px->loc && (rc = wk_local_rejoin_wait(px))) /* the machine's ranks, all here */
		return rc;
	/* every rank alike: rank 0 alone knows which boxes answer */
	if (!px->boxes_all.n) /* no box was ever left out */
		return px->loc ? wk_local_renew(px, PBOX_OK, NULL, 0) : PBOX_OK;
	was = px->cfg.box.control.n;
	end_together(px, NULL, 0);
	px->cfg.box.control = px->boxes_all;
	renew(px, px->net.n, px->net.rank);
	wk_log(px, CFG_LOG_INFO,
	       "rejoin: incarnation %u of job %u with the %u boxes of [box] "
	       "control (%u before), job id %u",
	       px->epoch, px->cfg.job.id, px->cfg.box.control.n, was, px->net.job);
	rc = begin_again(px);
	if (px->loc)
		wk_local_renew(px, rc, NULL, 0);
	return rc;
}

/*
 * pbox_forget(): tensors a framework is done with (DDP's buckets of its
 * first iteration, once it has rebuilt them) leave the boxes and the
 * SS_GPUs. Their state is in the middle of every summation service's
 * segments, laid out with the others', so the same ranks begin a new
 * incarnation of the job without them, as pbox_rejoin() does with the same
 * boxes: every kept tensor laid out anew (rounds from 0), the box's old
 * registration let go (UNREGISTER, before rank 0 registers the new one) so
 * that the budget holds what the job uses now.
 */
int pbox_forget(struct pbox *px, uint32_t n, const uint64_t *keys)
{
	uint32_t had = 0, dropped = 0;
	bool stores;
	int rc;

	if (px && n && !keys)
		return wk_err(PBOX_EINVAL, "pbox_forget: %u keys, but keys is NULL", n);
	if ((rc = can_renew(px, "pbox_forget", true)))
		return rc;
	if (px->loc)
		return wk_err(PBOX_EINVAL,
			      "pbox_forget: not with [worker] local_aggregation: its machines' "
			      "tensors are the leaders'");
	if ((rc = idle_now(px, "pbox_forget", &stores)))
		return rc;
	if (stores)
		return wk_err(PBOX_ESTATE,
			      "pbox_forget: this context holds asynchronous stores "
			      "(pbox_push_pull_async()), which a new incarnation would drop");
	if (!n)
		return PBOX_OK;
	for (uint32_t i = 0; i < px->n_t; i++) {
		had += px->t[i]->ready;
		dropped += px->t[i]->ready && listed(px->t[i]->key, keys, n);
	}
	end_together(px, keys, n);
	renew(px, px->net.n, px->net.rank);
	wk_log(px, CFG_LOG_INFO,
	       "forget: incarnation %u of job %u without %u of its %u tensors, job id %u at the "
	       "box",
	       px->epoch, px->cfg.job.id, dropped, had, px->net.job);
	return begin_again(px);
}
