/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Loss recovery and the send schedule of our pushes: new fragments from
 * the priority heap within the credit and the pacing, the timer FIFOs
 * (one per backoff level: only heads are looked at), probes (fast, tail,
 * and at the timeout) that ask an SS where the round is before sending
 * the data again, and the answers: a result, ACK, NACK or DONE. The engine
 * thread's alone.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>

#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_units.h"
#include "wk_fail.h"
#include "wk_sched.h"
#include "wk_frag.h"
#include "wk_serve.h"
#include "wk_flow.h"

/* Fragment @g was just sent to @un (its push or a probe): into the timer
 * FIFO of its backoff level and the FIFO of that SS, both in send order. */
static void sent_to(struct pbox *px, struct wk_unit *un, uint32_t g)
{
	struct wk_frag *f = &px->net.es.frag[g];

	if (wk_ring_push(&px->net.es.ring[f->level], g, f->stamp) ||
	    wk_ring_push(&un->sent, g, f->stamp))
		wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0, "out of memory for the send FIFOs");
}

/* The header of our push (or probe: @op) of fragment @g, unsigned. */
static struct pbox_hdr frag_hdr(const struct pbox *px, uint32_t g, uint8_t op, bool retrans)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	uint32_t c = g / px->net.fpc;

	return (struct pbox_hdr){
		.op = op,
		.dtype = (uint8_t)(f->op->t->dtype | f->op->comp << PBOX_COMP_SHIFT),
		.flags = (uint8_t)((retrans ? PBOX_F_RETRANS : 0) |
				   (f->op->rcomp != f->op->comp
					    ? PBOX_F_RCOMP | f->op->rcomp << PBOX_F_RCOMP_SHIFT
					    : 0)),
		.rank = (uint16_t)px->net.rank,
		.job = px->net.job,
		.chunk = px->net.chunk_local[c],
		.frag = (uint16_t)(g % px->net.fpc),
		.len = op == PBOX_OP_PUSH ? wk_push_len(px, f) : 0,
		.round = f->op->round};
}

/*
 * A probe of fragment @g (a remote SS's): we suspect a loss, and ask where
 * the round is instead of sending the data again. The SS answers with an
 * ACK (our part is in; the round waits for others), a NACK (our push was
 * lost: on_nack() resends) or a DONE (the round is complete and its result
 * went to us before the DONE, on the same path: on_done() asks for it
 * again, with @pull, which the SS answers with the result itself).
 */
static void probe_frag(struct pbox *px, struct eng *e, uint32_t g, bool pull)
{
	struct wk_frag *f = &px->net.es.frag[g];
	struct wk_unit *un = &px->net.unit[px->net.chunk_unit[g / px->net.fpc]];
	struct pbox_hdr h = frag_hdr(px, g, PBOX_OP_PROBE, false);
	static const uint8_t none[1];

	if (pull) {
		h.flags |= PBOX_F_PULL;
		px->net.es.st.pulls++;
	}
	h.mac = nic_mac_of(&px->net.mac, &h, none);
	f->stamp = ++px->net.es.stamp;
	wk_tx_add(px, e, un->ip_be, un->port, &h, none, 0, false);
	f->sent = wk_departure(px);
	f->probed = 1;
	f->fast = 0;
	f->probes++;
	px->net.es.st.probes++;
	sent_to(px, un, g);
}

/* What a push of @len bytes of fragment @f books on the link: its bytes,
 * or with one direction compressed the longer of the push and its sum,
 * which comes back on a link of the same rate (a push compressed alone,
 * "fp16>none", paced by its own bytes went out twice as fast as its sums
 * could return, and their queue overflowed). */
static uint16_t booked_len(const struct pbox *px, const struct wk_frag *f, uint16_t len)
{
	uint16_t r = f->op->rcomp == f->op->comp ? 0 : wk_result_len(px, f);

	return r > len ? r : len;
}

/* Fragment @g as sent to unit @u now, alone or (@u's SS_GPU takes a
 * chunk's turns in one push: start_turns()) in another fragment's push. */
static void mark_pushed(struct pbox *px, uint32_t u, uint32_t g)
{
	struct wk_frag *f = &px->net.es.frag[g];

	f->sent = f->pushed = wk_departure(px);
	f->probed = 0;
	f->fast = 0;
	f->acked = 0;
	f->probes = 0;
	sent_to(px, &px->net.unit[u], g);
}

/* Fragment @g's push (@flags: PBOX_F_REST, a turn for the rest of its chunk too). */
static void push_flagged(struct pbox *px, struct eng *e, uint32_t g, bool retrans, uint8_t flags)
{
	struct wk_frag *f = &px->net.es.frag[g];
	uint32_t c = g / px->net.fpc, u = px->net.chunk_unit[c];
	const struct wk_tensor *t = f->op->t;
	struct pbox_hdr h = frag_hdr(px, g, PBOX_OP_PUSH, retrans);
	static const uint8_t none[1]; /* an empty push: a rooted tensor's turn */
	const uint8_t *payload = !h.len			       ? none
				 : f->op->comp || f->op->flush ? wk_comp_payload(px, g)
							       : f->op->in + wk_frag_off(px, g, t);

	if (!payload)
		return;
	h.flags |= flags;
	h.mac = nic_mac_of(&px->net.mac, &h, payload);
	f->stamp = ++px->net.es.stamp;
	if (u == px->net.self_unit) { /* our own SS_GPU: no network */
		wk_serve_own(px, e, g, &h, payload);
		return;
	}
	wk_pace_book(px, 1, booked_len(px, f, h.len));
	wk_tx_send(px, e, px->net.unit[u].ip_be, px->net.unit[u].port, &h, payload, h.len,
		   px->net.unit[u].rank >= 0, true);
	px->net.unit[u].tx += h.len;
	if (retrans) {
		px->net.unit[u].retrans++;
		px->net.es.st.retransmits++;
	}
	mark_pushed(px, u, g);
}

static void push_frag(struct pbox *px, struct eng *e, uint32_t g, bool retrans)
{
	push_flagged(px, e, g, retrans, 0);
}

/* ---- deadlines: naming the silent party -------------------------------------- */

static void fail_remote(struct pbox *px, uint32_t g, uint64_t now)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	const struct wk_unit *u = &px->net.unit[px->net.chunk_unit[g / px->net.fpc]];
	char hint[96];

	if (u->rank >= 0)
		snprintf(hint, sizeof(hint), "rank %d is silent", u->rank);
	else
		snprintf(hint, sizeof(hint), "the box, or a worker pushing to it, is silent");
	wk_raise(px, WK_FK_TIMEOUT, 0, 0,
		 "no sum from %s for tensor key %" PRIu64
		 " (round %u) in %.1f s after %u sends: %s",
		 u->name, f->op->t->key, f->op->round, (double)(now - f->first) / 1e9, f->tries,
		 hint);
}

/* ---- the loop's steps ----------------------------------------------------- */

/* New push-pulls: into the heap, or parked until their tensor is agreed. */
void wk_flow_take_new(struct pbox *px)
{
	struct pbox_handle *op;

	pthread_mutex_lock(&px->mu);
	op = px->subq;
	px->subq = px->subq_tail = NULL;
	pthread_mutex_unlock(&px->mu);
	while (op) {
		struct pbox_handle *next = op->next;

		if (op->t->ready)
			wk_sched_take(px, op);
		else
			op->t->parked = op;
		op = next;
	}
}

/* Fragment @g in flight from @now: its first send's bookkeeping. */
static void begin_frag(struct pbox *px, uint32_t g, uint64_t now)
{
	struct wk_frag *f = &px->net.es.frag[g];
	uint16_t charge = wk_charge(px, f);

	f->state = WK_INFLIGHT;
	f->tries = 1;
	f->level = 0;
	f->first = f->sent = f->pushed = now;
	px->net.es.credit_used += charge;
	if (px->net.es.credit_used > px->net.es.st.max_inflight)
		px->net.es.st.max_inflight = px->net.es.credit_used;
	if (charge && !f->op->inflight)
		wk_active_add(&px->net.es.active, f->op);
	f->op->inflight += charge;
	if (!charge) {
		px->net.es.turns_out++;
		if (!f->op->turns_out++)
			wk_active_add(&px->net.es.tactive, f->op);
	}
}

/* Fragment @g's first send. */
static void start_frag(struct pbox *px, struct eng *e, uint32_t g, uint64_t now)
{
	begin_frag(px, g, now);
	push_frag(px, e, g, false); /* may free the op: the last use */
}

/* Partition @p's next fragment with a payload, @p out of its heap (@pop)
 * when that is its last; UINT32_MAX when none is left. The partition
 * leaves before the last send: a push to our own SS_GPU can complete the
 * op at once, and its waiter frees the partitions. */
static uint32_t next_frag(struct pbox *px, struct wk_part *p, void (*pop)(struct pbox *))
{
	uint32_t g = p->g;

	if (g == p->g_end || !px->net.es.frag[g].len) { /* only a tail chunk's empty frags */
		p->g = p->g_end;
		pop(px);
		return UINT32_MAX;
	}
	while (++p->g < p->g_end && !px->net.es.frag[p->g].len)
		;
	if (p->g == p->g_end)
		pop(px);
	return g;
}

/*
 * Turn fragment @g of partition @p (next_frag() took it) started, with,
 * where its SS is a peer's SS_GPU, every later one of its chunk in @p:
 * one empty push flagged PBOX_F_REST stands for them all (ss_push_each()).
 * A chunk's turns then cost one header instead of one a fragment: at n = 8
 * the all-gather took 0.8% less time. Each fragment is in flight as if
 * pushed alone: its own result ends it, and a lost turn is found and sent
 * again fragment by fragment (probes, plain turns). Our own SS_GPU (no
 * network) and the box (no rooted chunks) take a turn a fragment.
 * Returns the fragments started.
 */
static int start_turns(struct pbox *px, struct eng *e, struct wk_part *p, uint32_t g, uint64_t now)
{
	const uint32_t u = px->net.chunk_unit[g / px->net.fpc];
	/* p->g: the next fragment, p->g_end once next_frag() took p off the heap */
	uint32_t end = g - g % px->net.fpc + px->net.fpc, k = p->g;
	int n = 1;

	if (end > p->g_end)
		end = p->g_end;
	if (u == px->net.self_unit || px->net.unit[u].rank < 0 || k >= end ||
	    !px->net.es.frag[k].len) {
		start_frag(px, e, g, now);
		return 1;
	}
	begin_frag(px, g, now);
	push_flagged(px, e, g, false, PBOX_F_REST);
	for (; k < end && px->net.es.frag[k].len && !px->fail; k++, n++) {
		begin_frag(px, k, now);
		px->net.es.frag[k].stamp = ++px->net.es.stamp;
		mark_pushed(px, u, k);
	}
	for (p->g = k; p->g < p->g_end && !px->net.es.frag[p->g].len; p->g++)
		;
	if (p->g == p->g_end)
		wk_turns_pop(px);
	return n;
}

/*
 * The turns: empty pushes (a rooted tensor's, where this rank has no data:
 * an all-gather's other shards, a broadcast not ours), in the heap's order
 * but apart from it. A header each, they wait for no pacing slot and hold
 * none of the credit: held behind this rank's own data (its link busy
 * fanning out its shard of an all-gather), they would hold up every other
 * root's rounds, and that root's credit with them. Their own window keeps
 * them from flooding the link: as many turns as every other rank's credit
 * holds fragments, and a few. Less would deadlock: a root whose credit is
 * full of its own pushes waits for our turns past our window, while our
 * window is full of turns waiting for other roots held up the same way;
 * with every root's credit covered, the root furthest behind always has
 * every turn it waits for, and moves. And a more urgent collective's turns
 * go past a window full of less urgent ones (wk_beyond_window()).
 */
static int send_turns(struct pbox *px, struct eng *e, uint64_t now)
{
	const uint64_t window =
		(uint64_t)(px->net.n - 1) * (px->net.es.credit / px->net.frag_size + 16);
	int sent = 0;

	while (px->net.es.turns_n && !px->fail &&
	       (px->net.es.turns_out < window || wk_beyond_window(px, px->net.es.turns[0]))) {
		struct wk_part *p = px->net.es.turns[0];
		uint32_t g = next_frag(px, p, wk_turns_pop);

		if (g == UINT32_MAX)
			continue;
		p->op->tlast = p;
		sent += start_turns(px, e, p, g, now);
	}
	return sent;
}

/* Whether partition @p stopped inside a chunk whose results come to us
 * only once it is whole: a reduce's where we are not its root, whose SS
 * sends the chunk's empty results in one (serve.c). The rest of the chunk
 * goes out beyond the credit (a chunk at most), or what we have in flight
 * of it would wait for what the credit holds back, until a probe's
 * timeout. */
static bool inside_chunk(const struct pbox *px, const struct wk_part *p)
{
	const struct wk_tensor *t = p->op->t;

	return p->g % px->net.fpc && t->kind == WK_REDUCE && t->root != px->net.rank;
}

/* [job] leader_order (sched.c's wk_ordered()): rank 0's partition being
 * sent (es.cur) out of the heap once sent to its end; and, on the others,
 * a partition of theirs out of the list where it waits for rank 0's word. */
static void cur_pop(struct pbox *px)
{
	wk_heap_remove(px, px->net.es.cur);
}

static void ord_pop(struct pbox *px)
{
	struct wk_eng_state *es = &px->net.es;

	for (uint32_t i = 0; i < es->ord_n; i++)
		if (es->ord[i] == es->cur) {
			es->ord[i] = es->ord[--es->ord_n];
			break;
		}
	es->cur = NULL;
	es->annq_head++;
}

/* Rank 0: partition @p's start, said to the others once. */
static void tell_start(struct pbox *px, struct wk_part *p)
{
	if (p->told || !wk_ordered(px, p->op))
		return;
	p->told = true;
	for (uint32_t r = 1; r < px->net.n; r++)
		if (px->net.peer_fd[r] >= 0)
			RP_SEND(px->net.peer_fd[r], ORD, ord, .key = p->op->t->key,
				.round = p->op->round, .row = p->row);
}

/* The others: our partition of rank 0's next word, or NULL while we have
 * not taken its push-pull yet (we never send one before rank 0 says it). */
static struct wk_part *ord_next(struct pbox *px)
{
	struct wk_eng_state *es = &px->net.es;
	const struct wk_ord *o = &es->annq[es->annq_head];

	if (es->cur)
		return es->cur;
	for (uint32_t i = 0; i < es->ord_n; i++) {
		struct wk_part *p = es->ord[i];

		if (p->op->t->key == o->key && p->op->round == o->round && p->row == o->row)
			return es->cur = p;
	}
	return NULL;
}

/* The others: our all-reduces' partitions in rank 0's order, each to its
 * end, beyond the credit (rank 0's credit holds the job's). */
static int send_ordered(struct pbox *px, struct eng *e, uint64_t now)
{
	struct wk_eng_state *es = &px->net.es;
	int sent = 0;

	while (es->annq_head < es->annq_n && !px->fail && !wk_pace_busy(px)) {
		struct wk_part *p = ord_next(px);
		uint32_t g;

		if (!p)
			break;
		g = next_frag(px, p, ord_pop); /* ord_pop() before the last send */
		if (g == UINT32_MAX)
			continue;
		start_frag(px, e, g, now);
		sent++;
	}
	return sent;
}

/* New fragments, the most urgent partition first, while credit lasts. */
int wk_flow_send_new(struct pbox *px, struct eng *e, uint64_t now)
{
	const bool lead = px->cfg.job.leader_order && px->net.rank == 0;
	int sent = send_turns(px, e, now);

	if (wk_pace_short(px))
		return sent;
	if (px->cfg.job.leader_order && px->net.rank != 0)
		sent += send_ordered(px, e, now);
	while (px->net.es.heap_n && !px->fail && !wk_pace_busy(px)) {
		struct wk_part *p = px->net.es.heap[0], *c = px->net.es.cur;
		/* rank 0 leading: the partition started goes to its end first (a
		 * partition leaves the heap only below, which clears es.cur as it
		 * does, and so does every drop of the heap: es.cur is in it) */
		bool sticky = lead && c && c != p && px->net.es.credit_used < px->net.es.cwnd;
		uint32_t g;

		if (sticky)
			p = c;
		else if (px->net.es.credit_used >= px->net.es.cwnd && !inside_chunk(px, p) &&
			 !wk_beyond_credit(px, p))
			break;
		if (lead) {
			px->net.es.cur = p;
			tell_start(px, p);
		}
		g = next_frag(px, p, sticky ? cur_pop : wk_heap_pop);
		if (lead && p->g == p->g_end)
			px->net.es.cur = NULL;
		if (g == UINT32_MAX)
			continue;
		start_frag(px, e, g, now);
		sent++;
	}
	return sent;
}

/* The wait before the next send at backoff level @l: doubling, but at
 * least a dozen tries fit in the deadline. */
static uint64_t backoff(const struct pbox *px, unsigned l)
{
	uint64_t rto = px->net.es.rto_ns;
	uint64_t w = rto << l, cap = px->net.es.deadline_ns / 12;

	return w < cap ? w : cap > px->net.es.rto_min_ns ? cap : px->net.es.rto_min_ns;
}

int wk_flow_retransmit(struct pbox *px, struct eng *e, uint64_t now)
{
	int sent = 0;
	uint32_t g;

	for (unsigned l = 0; l < WK_LEVELS && !px->fail; l++) {
		struct wk_frag *f;

		uint64_t wait = backoff(px, l);

		while (!px->fail && !wk_pace_busy(px) &&
		       (f = wk_ring_head(px, &px->net.es.ring[l], &g)) && now >= f->sent &&
		       now - f->sent >= wait) {
			px->net.es.ring[l].head++;
			if (now - f->first >= px->net.es.deadline_ns) {
				fail_remote(px, g, now);
				break;
			}
			f->level = (uint8_t)(l + 1 < WK_LEVELS ? l + 1 : l);
			/* The last resort, when no probe found the loss sooner: it
			 * asks too, and only a probe unanswered for a whole timeout
			 * (the SS slow or gone) sends the data again. */
			if (!f->probed) {
				probe_frag(px, e, g, false);
				continue;
			}
			/* Paced, we never send faster than our link: a timeout is a
			 * loss, not congestion */
			if (!px->cfg.tuning.pacing)
				wk_cwnd_cut(px, now);
			f->tries++;
			push_frag(px, e, g, true);
			sent++;
		}
	}
	if (!px->fail)
		wk_serve_overdue(px, now);
	return sent;
}

/* The next expiry among the FIFO heads, or the next pacing slot when
 * something waits for one, in ns from @now (capped). */
uint64_t wk_flow_next_expiry(struct pbox *px, uint64_t now, uint64_t cap)
{
	uint64_t best = cap;
	uint32_t g;

	if (wk_pace_short(px)) {
		uint64_t slot = px->net.es.tx_clock_ns + px->net.es.pace_quantum_ns -
				px->net.es.pace_burst_ns - now;

		if ((px->net.es.heap_n || px->net.es.annq_head < px->net.es.annq_n) && slot < best)
			best = slot;
	}

	bool waiting = false;

	for (unsigned l = 0; l < WK_LEVELS; l++) {
		struct wk_frag *f = wk_ring_head(px, &px->net.es.ring[l], &g);

		if (f) {
			uint64_t due = f->sent + backoff(px, l);

			if (due <= now)
				return 0;
			if (due - now < best)
				best = due - now;
			waiting = true;
		}
	}
	/* and, while anything waits, the tail probe's next look */
	if (waiting) {
		uint64_t due = px->net.es.tail_next_ns > now ? px->net.es.tail_next_ns - now : 1;

		if (due < best)
			best = due;
	}
	return best;
}

/*
 * Probes. A fragment in flight is probed when something suggests a loss
 * (below) and a probe of it is due:
 *  - nothing asked since our push: at once;
 *  - a probe unanswered for two probe round trips: again (it, or its
 *    answer, was lost);
 *  - the SS has said our part is in (ACK): the round waits for other
 *    ranks, and only our result can still be lost; again after twice the
 *    probe round trip, doubling per probe up to 16 times (while a slow rank
 *    holds the round, each probe is a header and an ACK; one that arrives
 *    after the round completed gets a DONE, which follows the result).
 * Probes restart the fragment's timer but do not back it off.
 */
static uint64_t probe_gap(const struct pbox *px)
{
	uint64_t w = 2 * px->net.es.probe_rtt_ns;

	return w > 1000000 ? w : 1000000;
}

static bool probe_due(const struct pbox *px, const struct wk_frag *f, uint64_t now)
{
	if (now < f->sent)
		return false;
	if (f->acked)
		return now - f->sent >= probe_gap(px) << (f->probes < 4 ? f->probes : 4);
	if (f->probed)
		return now - f->sent >= probe_gap(px);
	return true;
}

/*
 * Fast recovery. An SS completes a round when the last rank's push of it
 * arrives, so when ranks send in one order its results come back in that
 * order: when the result of a fragment we pushed at @pushed arrives from
 * @un while a fragment we sent there before it still waits, that one has
 * lost a push (ours or another rank's) or its result. Probe it rather than
 * wait for its timer (SACK's fast retransmit; a probe costs a header, and
 * the SS says whether to resend). Results of resent fragments say nothing
 * of order.
 *
 * Ranks do not always send in one order: a tensor that arrives later with
 * a higher priority preempts one already going out, at a different point
 * on each rank (ByteScheduler's per-parameter sums reorder every step), and
 * ranks sharing cores run apart. So, as RACK does (RFC 8985's reo_wnd), a
 * fragment is probed only when one pushed at least reo_ns after it was
 * summed first: the window widens by a quarter of the probe round trip for
 * each fast probe that proved needless (the SS had our part, or the result
 * came before the answer) and halves for each that found a loss, so that
 * reordering costs few probes and a loss is still found by the next
 * results. probe_due()'s backoff once the SS has our part stays.
 */
static void overtaken(struct pbox *px, struct eng *e, struct wk_unit *un, uint64_t pushed,
		      uint64_t now)
{
	struct wk_frag *f;
	uint32_t g;

	for (unsigned i = 0; i < 8 && (f = wk_ring_head(px, &un->sent, &g)) && f->sent < pushed;
	     i++) {
		if (pushed - f->sent < px->net.es.reo_ns || !probe_due(px, f, now))
			return; /* the FIFO is in send order: the rest were sent later */
		un->sent.head++;
		px->net.es.st.fast_probes++;
		probe_frag(px, e, g, false);
		f->fast = 1;
	}
}

/* What our fast probe of @f found: a loss (@needless false) narrows the
 * reordering window, mere reordering widens it, up to half the time to a
 * sum (a loss is then still found well before the timeout). */
static void fast_verdict(struct pbox *px, struct wk_frag *f, bool needless)
{
	struct wk_eng_state *es = &px->net.es;
	uint64_t step = es->probe_rtt_ns / 4 > 20000 ? es->probe_rtt_ns / 4 : 20000;

	if (!f->fast)
		return;
	f->fast = 0;
	if (!needless)
		es->reo_ns /= 2;
	else if (es->reo_ns + step <= es->srtt_ns / 2)
		es->reo_ns += step;
}

/*
 * Tail losses: a lost push or result with nothing sent after it to the same
 * SS is overtaken by nothing. When an SS has sent us nothing for two probe
 * gaps and our oldest fragment there has waited as long, probe that one
 * (TCP's tail loss probe). While the SS only waits for a slow rank, that is
 * a header and an ACK per interval, backing off.
 */
void wk_flow_tail_probe(struct pbox *px, struct eng *e, uint64_t now)
{
	uint64_t w = 2 * probe_gap(px);

	if (now < px->net.es.tail_next_ns)
		return;
	px->net.es.tail_next_ns = now + w / 2;
	for (uint32_t u = 0; u < px->net.n_units && !px->fail; u++) {
		struct wk_unit *un = &px->net.unit[u];
		struct wk_frag *f;
		uint32_t g;

		if (u == px->net.self_unit || !(f = wk_ring_head(px, &un->sent, &g)) ||
		    now < f->sent || now - f->sent < w || now - un->heard_ns < w ||
		    !probe_due(px, f, now) || wk_pace_busy(px))
			continue;
		un->sent.head++;
		px->net.es.st.tail_probes++;
		probe_frag(px, e, g, false);
	}
}

/* An answer to our probe of @f: its round trip is the network's. */
static void probe_answered(struct pbox *px, struct wk_frag *f, uint64_t now)
{
	uint64_t r;

	if (!f->probed)
		return;
	f->probed = 0;
	if (now < f->sent) /* f->sent is when the pacer reckoned it would leave */
		return;
	r = now - f->sent;
	px->net.es.probe_rtt_ns =
		px->net.es.probe_rtt_ns ? (7 * px->net.es.probe_rtt_ns + r) / 8 : r;
}

/*
 * The SS has our part (its answer to our probe, or to a resent push): the
 * sum waits for slower ranks, each of which finds its own lost push by its
 * own probes. Ours is probed again only after probe_due()'s backoff (our
 * result may still be lost). The timeout itself stays: a longer one would
 * only delay the repair of our own losses.
 */
static void on_ack(struct pbox *px, struct wk_frag *f, uint64_t now)
{
	fast_verdict(px, f, true);
	probe_answered(px, f, now);
	if (f->acked)
		return;
	f->acked = 1;
	px->net.es.st.acks++;
}

/*
 * The SS has no part of ours in this round. In answer to our last probe
 * (sent after our last push, on the same path): that push was lost; resend
 * at once. Any other NACK (an answer to an earlier probe, overtaken by our
 * resend) says nothing of the push now on its way: it is resent only once
 * that has had half a timeout to arrive.
 */
static void on_nack(struct pbox *px, struct eng *e, uint32_t g, uint64_t now)
{
	struct wk_frag *f = &px->net.es.frag[g];
	bool asked = f->probed && f->sent > f->pushed;

	px->net.es.st.nacks++;
	fast_verdict(px, f, false); /* the push had not come: lost, or overtaken */
	probe_answered(px, f, now);
	if (!asked && (now < f->pushed || now - f->pushed < px->net.es.rto_ns / 2))
		return;
	f->tries++;
	push_frag(px, e, g, true);
}

/*
 * The round we probed is complete, and its result went to us before this
 * DONE on the same path: had it arrived, the fragment would be done. It was
 * lost; ask for it again, now.
 */
static void on_done(struct pbox *px, struct eng *e, uint32_t g, uint64_t now)
{
	fast_verdict(px, &px->net.es.frag[g], false);
	probe_answered(px, &px->net.es.frag[g], now);
	probe_frag(px, e, g, true);
}

/* Fragment @g's result (@h, @p) from @un, checked and ours. */
static void take_result(struct pbox *px, struct eng *e, struct wk_unit *un, uint32_t g,
			const struct pbox_hdr *h, const uint8_t *p, uint64_t now)
{
	struct wk_frag *f = &px->net.es.frag[g];
	uint64_t pushed = f->pushed;
	bool clean = f->state == WK_INFLIGHT && f->tries == 1;

	if (f->state == WK_INFLIGHT && f->probed) /* before our probe's answer */
		fast_verdict(px, f, true);
	if (!wk_deliver(px, g, p, h->len, (uint8_t)pbox_hdr_comp(h), h->round) ||
	    px->fail) /* fail: the flush */
		return;
	un->rx += h->len;
	if (clean)
		overtaken(px, e, un, pushed, now);
}

void wk_flow_result(struct pbox *px, struct eng *e, const struct pbox_hdr *h, const uint8_t *p,
		    const struct sockaddr_in *from, uint64_t now)
{
	uint32_t u = wk_unit_of(px, from->sin_addr.s_addr, ntohs(from->sin_port)), g;
	struct wk_unit *un;

	if (u == UINT32_MAX || u == px->net.self_unit)
		return;
	un = &px->net.unit[u];
	/* signed by the job's key; the box's "no such job" cannot be (it has
	 * no key for the job), and is taken from the box's address alone */
	if (!nic_mac_ok(&px->net.mac, h, p) && !(h->op == PBOX_OP_ERROR && h->mac == 0 &&
						 un->rank < 0 && nic_be16(p) == PBOX_ERR_NO_JOB)) {
		px->net.es.st.bad_mac++;
		return;
	}
	if (h->op == PBOX_OP_ERROR) {
		unsigned code = nic_be16(p);

		if (code == PBOX_ERR_NO_JOB && un->rank < 0) {
			/* perhaps rank 0 just unregistered it after a LOST: give that word
			 * a moment to arrive */
			if (!px->net.es.nojob_since)
				px->net.es.nojob_since = now;
			return;
		}
		wk_raise(px, WK_FK_REFUSED, un->rank < 0 ? PBOX_EBOX : PBOX_EPEER, 0,
			 "%s refused our pushes: %s", un->name, nic_err_text(code));
		return;
	}
	if (h->rank != px->net.rank || h->chunk >= un->n_chunks || h->frag >= px->net.fpc)
		return;
	un->heard_ns = now;
	if (un->rank < 0) /* the box answers for our job: a "no such job" was stale */
		px->net.es.nojob_since = 0;
	g = un->global[h->chunk] * px->net.fpc + h->frag;
	if (h->op != PBOX_OP_RESULT) { /* an answer of no payload, to a probe or a resend */
		struct wk_frag *f = &px->net.es.frag[g];

		if (f->state != WK_INFLIGHT || f->op->round != h->round) /* stale */
			return;
		if (h->op == PBOX_OP_ACK)
			on_ack(px, f, now);
		else if (h->op == PBOX_OP_NACK)
			on_nack(px, e, g, now);
		else
			on_done(px, e, g, now);
		return;
	}
	if (!(h->flags & PBOX_F_REST)) {
		take_result(px, e, un, g, h, p, now);
		return;
	}
	/* an empty result for the whole chunk (a reduce's other ranks'): each
	 * fragment's, where it is one (wk_deliver() checks) */
	for (uint32_t k = g - h->frag;
	     k < g - h->frag + px->net.fpc && px->net.es.frag[k].len && !px->fail; k++)
		take_result(px, e, un, k, h, p, now);
}
