/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Tensors that come after pbox_start(): a framework hands its collectives
 * tensors as it goes (PyTorch's DDP rebuilds its buckets after the first
 * iteration), so a job grows. A tensor first seen after the start is
 * agreed with every rank before any of its data moves, on the bootstrap
 * connections, by the engine thread:
 *
 *   rank r -> rank 0   NEW <seq> <key> <count> <dtype> <prio> <call>
 *       seq: its place in this rank's order of new tensors (0, 1, ...);
 *       call: the collective that first used it, in this rank's order of
 *       push-pulls (all ranks must agree on it too; none for a tensor
 *       declared after the start: ~0)
 *   rank 0 -> every rank, once all n ranks said NEW for seqs [a, b) and
 *   they agree (key, count, dtype):
 *                      GREW <a> <b>
 *   or, at the first seq where they do not:
 *                      MISMATCH <what differs, naming the ranks>
 *
 * A rank whose collective at that place is not a new tensor (it pushed a
 * tensor it had used before) never says NEW for it, and the others would
 * wait for it to their deadline. So once a seq has waited WK_PROBE_NS for
 * some ranks, rank 0 asks them:
 *
 *   rank 0 -> rank r   WAIT <seq> <call>
 *   rank r -> rank 0   AT <seq> <call> <key> <count> <dtype>  (or AT <seq> <call> past)
 *
 * A rank answers once it has reached that collective, and only when it is
 * not that new tensor (a rank that is merely late says nothing until it
 * gets there); rank 0 then fails every rank with a MISMATCH naming both
 * ranks, the collective and both tensors.
 *
 * Rank 0 agrees once no NEW has come for WK_AGREE_QUIET_NS: the new tensors
 * of one iteration (a framework's buckets come in a burst) become one
 * growth, one segment per dtype, and the box's cores walk few segments.
 *
 * On GREW every rank lays the new tensors out in the same way (wk_grow: one
 * segment per dtype, chunks after the job's earlier ones, the weights of
 * the start), and rank 0 has already added the box's share to the job
 * (GROW on its control connection, admitted against the box's budget as a
 * registration is) before it says GREW: no push for the new chunks can
 * reach the box before the box has them. A rank's SS_GPU may hear a push
 * for a new chunk before that rank has read GREW (rank 0 pushes as it
 * says it): serve.c holds it and sums it once the chunk is laid out (past
 * what it holds, the sender's resend finds it laid out). Every line wakes
 * the engine (its nap polls the connections) and rank 0's nap ends when
 * the quiet moment does: a new tensor's first push-pull takes the quiet
 * moment and two round trips more than a known one's, where each step
 * once waited out a nap of up to 20 ms and the pushes a timeout (81 ms a
 * new tensor on loopback, 4 now).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_units.h"
#include "wk_fail.h"
#include "wk_box.h"
#include "wk_sched.h"
#include "wk_grow.h"

#define WK_AGREE_QUIET_NS 3000000ull
#define WK_PROBE_NS	  1000000000ull

int wk_grow(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, struct wk_box_batch *later,
	    uint64_t deadline, char *msg, size_t cap)
{
	struct wk_tensor **group = malloc((n ? n : 1) * sizeof(*group));
	uint32_t *base = calloc(px->net.n_units, sizeof(uint32_t)),
		 *count = calloc(px->net.n_units, sizeof(uint32_t));
	int rc = PBOX_OK;

	if (!group || !base || !count) {
		snprintf(msg, cap, "out of memory");
		rc = PBOX_ENOMEM;
		goto out;
	}
	for (unsigned d = 0; d < SUM_DTYPE_COUNT && rc == PBOX_OK; d++) {
		uint32_t m = 0, on_box = 0;

		for (uint32_t i = 0; i < n; i++)
			if (ts[i]->dtype == d)
				group[m++] = ts[i];
		if (!m)
			continue;
		rc = wk_layout_add(px, group, m, base, count);
		if (rc) {
			snprintf(msg, cap, "%s", pbox_last_error());
			break;
		}
		px->net.segments++;
		for (uint32_t e = 0; e < px->net.n_eps; e++)
			on_box += count[e];
		if (px->net.rank == 0 && on_box && px->net.n_boxes &&
		    wk_box_segment(px, (uint8_t)d, base, count, later, deadline, msg, cap))
			rc = PBOX_EBOX;
	}
	for (uint32_t i = 0; i < n && rc == PBOX_OK && !later; i++)
		ts[i]->ready = true; /* the boxes have their chunks: pushes may go */
out:
	free(group);
	free(base);
	free(count);
	return rc;
}

/* Rank 0: the row of seq @s, rows growing as needed; NULL when out of memory. */
static struct wk_ag *ag_row(struct pbox *px, uint32_t s)
{
	uint32_t row = s - px->net.applied;

	if (row >= px->net.ag_rows) {
		if (row >= px->net.ag_cap) {
			uint32_t cap = px->net.ag_cap ? px->net.ag_cap * 2 : 16;
			struct wk_ag *v;

			while (cap <= row)
				cap *= 2;
			v = realloc(px->net.ag, (size_t)cap * px->net.n * sizeof(*v));
			if (!v)
				return NULL;
			px->net.ag = v;
			px->net.ag_cap = cap;
		}
		memset(&px->net.ag[(size_t)px->net.ag_rows * px->net.n], 0,
		       (size_t)(row + 1 - px->net.ag_rows) * px->net.n * sizeof(*px->net.ag));
		px->net.ag_rows = row + 1;
	}
	return &px->net.ag[(size_t)row * px->net.n];
}

static void record(struct pbox *px, uint32_t rank, uint32_t s, const struct wk_ag *a)
{
	struct wk_ag *row;

	if (s < px->net.applied) /* a repeat: ignored */
		return;
	row = ag_row(px, s);
	if (!row) {
		wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0, "out of memory agreeing on new tensors");
		return;
	}
	row[rank] = *a;
	row[rank].have = true;
	px->net.ag_last_ns = wk_now();
}

/* The new tensors [a, b) of this rank (@ts, freed here) on every box:
 * ready, their parked push-pulls go, and rank 0 tells the others (GREW). */
static void grown(struct pbox *px, uint32_t a, uint32_t b, struct wk_tensor **ts)
{
	for (uint32_t i = 0; i < b - a; i++) {
		ts[i]->ready = true;
		if (ts[i]->parked) {
			struct pbox_handle *op = ts[i]->parked;

			ts[i]->parked = NULL;
			wk_sched_take(px, op);
		}
	}
	free(ts);
	for (uint32_t r = 1; px->net.rank == 0 && r < px->net.n; r++)
		if (px->net.peer_fd[r] >= 0)
			RP_SEND(px->net.peer_fd[r], GREW, grew, .from = a, .to = b);
}

/* The new tensors [a, b) of this rank laid out. Rank 0 puts them on the
 * boxes first, through the box client's thread: the engine moves every
 * other tensor meanwhile, and grown() follows on a later turn. */
static void apply(struct pbox *px, uint32_t a, uint32_t b)
{
	struct wk_tensor **ts = malloc((b - a) * sizeof(*ts));
	struct wk_box_batch bb = {0};
	bool boxes = px->net.rank == 0 && px->net.n_boxes, sent;
	uint64_t deadline = wk_now() + px->net.es.deadline_ns;
	char msg[WK_ERR_LEN];
	int rc;

	if (!ts) {
		wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0, "out of memory laying out new tensors");
		return;
	}
	pthread_mutex_lock(&px->mu);
	memcpy(ts, &px->net.newt[a], (b - a) * sizeof(*ts));
	pthread_mutex_unlock(&px->mu);
	rc = wk_grow(px, ts, b - a, boxes ? &bb : NULL, deadline, msg, sizeof(msg));
	sent = bb.n > 0;
	if (rc == PBOX_OK && sent && (rc = wk_box_async(px, &bb, deadline)))
		snprintf(msg, sizeof(msg), "%s", pbox_last_error());
	if (rc) {
		wk_box_batch_free(&bb);
		free(ts);
		wk_raise(px, WK_FK_LOCAL, rc, 0, "new tensors %u to %u: %s", a, b - 1, msg);
		return;
	}
	px->net.applied = b;
	if (!sent) {
		grown(px, a, b, ts); /* no box has chunks of them */
		return;
	}
	px->net.es.grow_a = a;
	px->net.es.grow_b = b;
	px->net.es.grow_ts = ts;
}

/* Rank 0: the boxes' growth under way; whether it still is. */
static bool growing(struct pbox *px)
{
	char msg[WK_ERR_LEN];
	int rc;

	if (!px->net.es.grow_ts)
		return false;
	rc = wk_box_async_poll(px, msg, sizeof(msg));
	if (rc == 0)
		return true;
	if (rc < 0) {
		free(px->net.es.grow_ts);
		wk_raise(px, WK_FK_LOCAL, PBOX_EBOX, 0, "new tensors %u to %u: %s",
			 px->net.es.grow_a, px->net.es.grow_b - 1, msg);
	} else {
		grown(px, px->net.es.grow_a, px->net.es.grow_b, px->net.es.grow_ts);
	}
	px->net.es.grow_ts = NULL;
	return false;
}

static const char *ordinal(uint64_t n)
{
	return n % 10 == 1 && n % 100 != 11   ? "st"
	       : n % 10 == 2 && n % 100 != 12 ? "nd"
	       : n % 10 == 3 && n % 100 != 13 ? "rd"
					      : "th";
}

/* Rank 0: how the ranks' words on one new tensor differ, or "" when they
 * do not. */
static void disagree(const struct pbox *px, uint32_t s, const struct wk_ag *row, char *msg,
		     size_t cap)
{
	const struct wk_ag *z = &row[0];

	msg[0] = 0;
	for (uint32_t r = 1; r < px->net.n; r++) {
		const struct wk_ag *o = &row[r];
		const char *what =
			o->count != z->count   ? "element counts"
			: o->dtype != z->dtype ? "dtypes"
			: o->kind != z->kind || o->root != z->root
				? "collectives (all-reduce, or a sharded collective's piece and its root)"
			: o->key != z->key ? "keys"
			: o->prio != z->prio
				? "priorities (every rank must send tensors in one order)"
			: o->call != z->call && o->call != UINT64_MAX && z->call != UINT64_MAX
				? "places in the order of collectives"
				: NULL;

		if (!what)
			continue;
		snprintf(msg, cap,
			 "ranks disagree on new tensor %u (the %u%s tensor first used after "
			 "pbox_start()): rank 0 has key %" PRIu64 ", %" PRIu64 " elements of %s, "
			 "priority %d, first used by its collective %" PRIu64 "; rank %u has key "
			 "%" PRIu64 ", %" PRIu64 " elements of %s, priority %d, first used by its "
			 "collective %" PRIu64 ": the %s differ",
			 s, s + 1, ordinal(s + 1), z->key, z->count,
			 sum_dtype_name((enum sum_dtype)z->dtype), z->prio, z->call, r, o->key,
			 o->count, sum_dtype_name((enum sum_dtype)o->dtype), o->prio, o->call,
			 what);
		return;
	}
}

/* Rank 0: every rank fails with @msg. */
static void mismatch(struct pbox *px, const char *msg)
{
	for (uint32_t r = 1; r < px->net.n; r++)
		if (px->net.peer_fd[r] >= 0)
			RP_SEND(px->net.peer_fd[r], MISMATCH, mismatch, .why = msg);
	wk_raise(px, WK_FK_MISMATCH, 0, 0, "%s", msg); /* MISMATCH is the telling */
}

/* Rank 0: rank @from's collective @call, where another rank first used new
 * tensor @s, is not that tensor (@h: what it is; NULL: long past). */
static void at(struct pbox *px, uint32_t from, uint32_t s, uint64_t call, const struct wk_call *h)
{
	char msg[WK_ERR_LEN], theirs[160];
	const struct wk_ag *row;
	uint32_t r;

	if (s < px->net.applied || s - px->net.applied >= px->net.ag_rows || px->fail)
		return; /* agreed meanwhile */
	row = &px->net.ag[(size_t)(s - px->net.applied) * px->net.n];
	for (r = 0; r < px->net.n && !(row[r].have && row[r].call == call); r++)
		;
	if (r == px->net.n)
		return;
	if (!h)
		snprintf(theirs, sizeof(theirs), "a tensor it had used before");
	else
		snprintf(theirs, sizeof(theirs), "key %" PRIu64 ", %" PRIu64 " elements of %s, %s",
			 h->key, h->count, sum_dtype_name((enum sum_dtype)h->dtype),
			 h->fresh ? "another new tensor" : "a tensor it had used before");
	snprintf(msg, sizeof(msg),
		 "ranks disagree on their collective %" PRIu64 " (the %" PRIu64
		 "%s push-pull): rank %u first uses a new tensor there (key %" PRIu64 ", %" PRIu64
		 " elements of %s); rank %u pushes %s",
		 call, call + 1, ordinal(call + 1), r, row[r].key, row[r].count,
		 sum_dtype_name((enum sum_dtype)row[r].dtype), from, theirs);
	mismatch(px, msg);
}

/* Rank 0: new tensor seq applied + 0 has waited WK_PROBE_NS for some ranks:
 * ask them what their collective at that place is. */
static void probe(struct pbox *px)
{
	const struct wk_ag *row = px->net.ag;
	uint64_t call = UINT64_MAX;
	uint32_t r;

	px->net.probed = 1;
	for (r = 0; r < px->net.n && call == UINT64_MAX; r++)
		if (row[r].have)
			call = row[r].call;
	if (call == UINT64_MAX)
		return; /* declared, not used: no place to ask about */
	for (r = 0; r < px->net.n; r++) {
		if (row[r].have)
			continue;
		if (r == 0) {
			px->net.probe_on = true;
			px->net.probe_seq = px->net.applied;
			px->net.probe_call = call;
		} else if (px->net.peer_fd[r] >= 0) {
			RP_SEND(px->net.peer_fd[r], WAIT, wait, .seq = px->net.applied,
				.call = call);
		}
	}
}

/* Rank 0 asked about one of our collectives: answer once we have reached
 * it, unless it is the new tensor rank 0 waits for (its NEW answers). */
static void answer_probe(struct pbox *px)
{
	struct wk_call h;
	bool reached, known;

	pthread_mutex_lock(&px->mu);
	reached = px->net.calls > px->net.probe_call;
	h = px->net.hist[px->net.probe_call % WK_HIST];
	pthread_mutex_unlock(&px->mu);
	if (!reached)
		return;
	px->net.probe_on = false;
	known = h.call == px->net.probe_call;
	if (known && h.fresh && h.seq == px->net.probe_seq)
		return;
	if (px->net.rank == 0)
		at(px, 0, px->net.probe_seq, px->net.probe_call, known ? &h : NULL);
	else if (!known)
		RP_SEND(px->net.peer_fd[0], PAST, past, .seq = px->net.probe_seq,
			.call = px->net.probe_call);
	else
		RP_SEND(px->net.peer_fd[0], AT, at, .seq = px->net.probe_seq,
			.call = px->net.probe_call, .key = h.key, .count = h.count,
			.dtype = h.dtype, .fresh = h.fresh);
}

/* Rank 0: the leading seqs every rank has spoken for, agreed or not. */
static void agree(struct pbox *px)
{
	uint32_t rows = 0, a = px->net.applied;
	char msg[WK_ERR_LEN];

	while (rows < px->net.ag_rows) {
		const struct wk_ag *row = &px->net.ag[(size_t)rows * px->net.n];
		uint32_t r;

		for (r = 0; r < px->net.n && row[r].have; r++)
			;
		if (r < px->net.n)
			break;
		disagree(px, a + rows, row, msg, sizeof(msg));
		if (msg[0]) {
			mismatch(px, msg);
			return;
		}
		rows++;
	}
	if (!rows)
		return;
	memmove(px->net.ag, &px->net.ag[(size_t)rows * px->net.n],
		(size_t)(px->net.ag_rows - rows) * px->net.n * sizeof(*px->net.ag));
	px->net.ag_rows -= rows;
	px->net.probed = 0;
	apply(px, a, a + rows); /* the boxes first: then the ranks may push (grown()) */
}

void wk_grow_poll(struct pbox *px)
{
	bool busy = growing(px); /* one growth of the boxes at a time */
	uint32_t n_new;

	pthread_mutex_lock(&px->mu);
	n_new = px->net.n_new;
	pthread_mutex_unlock(&px->mu);
	if (px->net.rank == 0 && px->net.ag_rows && !px->fail && !busy &&
	    wk_now() - px->net.ag_last_ns >= WK_AGREE_QUIET_NS)
		agree(px);
	if (px->net.rank == 0 && px->net.ag_rows && !px->net.probed && !px->fail &&
	    wk_now() - px->net.ag_last_ns >= WK_PROBE_NS)
		probe(px);
	if (px->net.probe_on && !px->fail)
		answer_probe(px);
	while (px->net.announced < n_new && !px->fail) {
		struct wk_tensor *t;
		struct wk_ag a;

		pthread_mutex_lock(&px->mu);
		t = px->net.newt[px->net.announced];
		pthread_mutex_unlock(&px->mu);
		a = (struct wk_ag){.key = t->key,
				   .count = t->count,
				   .call = t->call,
				   .prio = t->prio,
				   .dtype = t->dtype,
				   .kind = t->kind,
				   .root = t->root};
		if (px->net.rank == 0 &&
		    px->net.n > 1) /* a world of one agrees with itself below */
			record(px, 0, t->seq, &a);
		else if (px->net.rank != 0 && px->net.peer_fd[0] >= 0)
			RP_SEND(px->net.peer_fd[0], NEW, newt, .seq = t->seq, .key = t->key,
				.count = t->count, .dtype = t->dtype, .prio = t->prio,
				.call = t->call, .kind = t->kind, .root = t->root);
		px->net.announced++;
	}
	if (px->net.n == 1 && px->net.applied < n_new && !px->fail && !busy)
		apply(px, px->net.applied, n_new);
}

uint64_t wk_grow_wait(const struct pbox *px, uint64_t now, uint64_t wait)
{
	uint64_t quiet = px->net.ag_last_ns + WK_AGREE_QUIET_NS;

	if (px->net.rank == 0 && px->net.ag_rows && !px->fail && quiet > now && quiet - now < wait)
		return quiet - now;
	return wait;
}

int wk_grow_line(struct pbox *px, uint32_t from, const struct rp_msg *m)
{
	const struct rp_at *at_ = &m->at;
	struct wk_call h;
	struct wk_ag a;

	switch (px->net.rank == 0 ? m->verb : RP_VERB_COUNT) { /* what rank 0 hears */
	case RP_NEW:
		a = (struct wk_ag){.key = m->newt.key,
				   .count = m->newt.count,
				   .call = m->newt.call,
				   .prio = m->newt.prio,
				   .dtype = m->newt.dtype,
				   .kind = (uint8_t)(m->newt.kind < WK_KIND_COUNT ? m->newt.kind
										  : WK_KIND_COUNT),
				   .root = m->newt.root};
		record(px, from, m->newt.seq, &a);
		return 1;
	case RP_PAST:
		at(px, from, m->past.seq, m->past.call, NULL);
		return 1;
	case RP_AT:
		h = (struct wk_call){.key = at_->key,
				     .count = at_->count,
				     .call = at_->call,
				     .dtype = at_->dtype,
				     .fresh = at_->fresh != 0};
		at(px, from, at_->seq, at_->call, &h);
		return 1;
	default:
		break;
	}
	switch (px->net.rank != 0 ? m->verb : RP_VERB_COUNT) { /* what the others hear */
	case RP_WAIT:
		px->net.probe_seq = m->wait.seq;
		px->net.probe_call = m->wait.call;
		px->net.probe_on = true;
		return 1;
	case RP_MISMATCH:
		/* every rank heard it from rank 0 */
		wk_raise(px, WK_FK_MISMATCH, 0, 0, "%s", m->mismatch.why);
		return 1;
	case RP_GREW:
		if (m->grew.from != px->net.applied || m->grew.to <= m->grew.from ||
		    m->grew.to > px->net.announced)
			wk_raise(
				px, WK_FK_PROTOCOL, 0, 0,
				"rank 0 agreed on new tensors %u to %u, but this rank has laid out "
				"%u and used %u",
				m->grew.from, m->grew.to - 1, px->net.applied, px->net.announced);
		else
			apply(px, m->grew.from, m->grew.to);
		return 1;
	default:
		return 0;
	}
}
