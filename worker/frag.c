/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Our fragments on their way: the timer FIFOs, the transmit path (paced,
 * counted, through the transport), the credit and the congestion window,
 * the round-trip estimator, compressed payloads, and a result delivered
 * into the caller's buffer, completing its push-pull. The engine thread's
 * alone (px->net.es).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_units.h"
#include "wk_handle.h"
#include "wk_fail.h"
#include "wk_sched.h"
#include "wk_tune.h"
#include "wk_udp.h"
#include "wk_frag.h"

/* ---- FIFOs of sent fragments ------------------------------------------- */

int wk_ring_push(struct wk_ring *r, uint32_t g, uint32_t stamp)
{
	if (r->tail - r->head == r->cap) {
		uint32_t cap = r->cap ? r->cap * 2 : 1024, i;
		uint32_t *ng = malloc(cap * sizeof(uint32_t)), *ns = malloc(cap * sizeof(uint32_t));

		if (!ng || !ns) {
			free(ng);
			free(ns);
			return -1;
		}
		for (i = 0; i < r->cap; i++) {
			ng[i] = r->g[(r->head + i) & (r->cap - 1)];
			ns[i] = r->stamp[(r->head + i) & (r->cap - 1)];
		}
		free(r->g);
		free(r->stamp);
		r->g = ng;
		r->stamp = ns;
		r->tail = r->cap;
		r->head = 0;
		r->cap = cap;
	}
	r->g[r->tail & (r->cap - 1)] = g;
	r->stamp[r->tail & (r->cap - 1)] = stamp;
	r->tail++;
	return 0;
}

/* The head's fragment if it is still the send it recorded; stale heads
 * (answered, or sent again since) are dropped on the way. */
struct wk_frag *wk_ring_head(struct pbox *px, struct wk_ring *r, uint32_t *g)
{
	while (r->head != r->tail) {
		uint32_t i = r->head & (r->cap - 1);
		struct wk_frag *f = &px->net.es.frag[r->g[i]];

		if (f->state == WK_INFLIGHT && f->stamp == r->stamp[i]) {
			*g = r->g[i];
			return f;
		}
		r->head++;
	}
	return NULL;
}

/* ---- transmit -------------------------------------------------------------- */

void wk_tx_flush(struct pbox *px, struct eng *e)
{
	px->net.tp->flush(px->net.tp_st, e);
}

/* One datagram out, through the transport, paced and counted. */
/* @n datagrams of @len payload bytes booked on the link's clock. */
void wk_pace_book(struct pbox *px, uint32_t n, uint16_t len)
{
	uint64_t start;

	if (!px->cfg.tuning.pacing)
		return;
	start = px->net.es.tx_clock_ns > px->net.es.now_ns ? px->net.es.tx_clock_ns
							   : px->net.es.now_ns;
	px->net.es.tx_clock_ns = start + (uint64_t)n *
						 ((uint64_t)len + PBOX_HDR_LEN + WK_L2L4_OVERHEAD) *
						 8000000 / px->net.es.pace_kbps;
}

/* One datagram out, through the transport, counted; paced unless booked
 * already (@booked: wk_pace_book()). */
void wk_tx_send(struct pbox *px, struct eng *e, uint32_t ip_be, uint16_t port,
		const struct pbox_hdr *h, const void *payload, uint16_t len, bool gso, bool booked)
{
	px->net.es.st.tx_pkts++;
	px->net.es.st.tx_bytes += len;
	if (!booked)
		wk_pace_book(px, 1, len);
	px->net.tp->tx(px->net.tp_st, e, ip_be, port, h, payload, len, gso);
}

void wk_tx_add(struct pbox *px, struct eng *e, uint32_t ip_be, uint16_t port,
	       const struct pbox_hdr *h, const void *payload, uint16_t len, bool gso)
{
	wk_tx_send(px, e, ip_be, port, h, payload, len, gso, false);
}

/* A reply to the sender of @req: an error (@code rides in the slot after
 * the header) or an ACK (no payload). */
void wk_tx_reply(struct pbox *px, struct eng *e, const struct nic_addr *to,
		 const struct pbox_hdr *req, uint8_t op, uint16_t code)
{
	struct pbox_hdr r = *req;
	uint8_t *slot;

	r.op = op;
	r.flags = 0;
	r.len = op == PBOX_OP_ERROR ? 2 : 0;
	slot = wk_udp_slot(px, e); /* tx_add must not flush: the code sits in its slot */
	nic_put16(slot, code);
	r.mac = nic_mac_of(&px->net.mac, &r, slot);
	wk_tx_add(px, e, to->ip_be, to->port, &r, slot, r.len, true);
}

/*
 * Pacing: the link is booked further ahead than a burst. A datagram handed
 * to the kernel sits in the NIC's queue, out of reach of the priority
 * scheduler, and its retransmission timer would run while it waits there.
 * So new sends and resends wait here instead; results still go at once.
 */
bool wk_pace_busy(const struct pbox *px)
{
	return px->cfg.tuning.pacing &&
	       px->net.es.tx_clock_ns > px->net.es.now_ns + px->net.es.pace_burst_ns;
}

/*
 * New fragments start out a quantum at a time: the thread waits until the
 * link has room for one, then fills it up to the burst. One wake-up and one
 * send (GSO: a chunk's fragments to one SS) per quantum, where sending each
 * fragment as its slot came cost a wake-up and a syscall per datagram,
 * thousands a second per rank, the CPU the other ranks and the box needed.
 */
bool wk_pace_short(const struct pbox *px)
{
	return px->cfg.tuning.pacing && px->net.es.tx_clock_ns + px->net.es.pace_quantum_ns >
						px->net.es.now_ns + px->net.es.pace_burst_ns;
}

/* When the last datagram queued will have left: the time its wait starts. */
uint64_t wk_departure(const struct pbox *px)
{
	return px->cfg.tuning.pacing && px->net.es.tx_clock_ns > px->net.es.now_ns
		       ? px->net.es.tx_clock_ns
		       : px->net.es.now_ns;
}

/* ---- fragments ---------------------------------------------------------- */

/* @op into the list at @head (px->net.es.active: ops with bytes in flight;
 * tactive: ops with turns in flight; an op holds one or the other). */
void wk_active_add(struct pbox_handle **head, struct pbox_handle *op)
{
	op->aprev = NULL;
	op->anext = *head;
	if (*head)
		(*head)->aprev = op;
	*head = op;
}

static void active_del(struct pbox_handle **head, struct pbox_handle *op)
{
	if (op->aprev)
		op->aprev->anext = op->anext;
	else
		*head = op->anext;
	if (op->anext)
		op->anext->aprev = op->aprev;
}

/*
 * The turns' window bounds the turns in flight, with one exception, the
 * credit's for turns: the turns' top partition @p goes out beyond the
 * window when it comes before the last partition started of some op whose
 * turns are in flight. Turns go out in the order every rank shares, but
 * only as their collectives come: a window full of turns of collectives
 * that came first, waiting for roots whose credit holds the pushes of more
 * urgent ones, would hold back those more urgent collectives' turns, and
 * the roots would wait for them (every rank stopped, each waiting for
 * another). With the exception, the most urgent fragment not yet summed
 * everywhere always has every rank's turn: any turn in flight is less
 * urgent, and so is the last partition started of its op.
 */
bool wk_beyond_window(const struct pbox *px, const struct wk_part *p)
{
	for (const struct pbox_handle *op = px->net.es.tactive; op; op = op->anext)
		if (op->tlast && wk_part_before(p, op->tlast))
			return true;
	return false;
}

/*
 * The credit bounds every byte in flight, with one exception that keeps
 * ranks from deadlocking: partition @p (the heap's top: the most urgent
 * waiting, by the (priority, key) order every rank shares) goes out beyond
 * the credit when its tensor is more urgent than every tensor in flight and
 * has nothing in flight itself, one partition at a time. So the most urgent
 * tensor not yet summed everywhere is always being sent by every rank,
 * whatever the credit holds (no two ranks can each hold the credit with
 * what the other has not sent), and the bytes in flight pass the credit by
 * one partition at most.
 */
bool wk_beyond_credit(struct pbox *px, struct wk_part *p)
{
	const struct wk_tensor *t = p->op->t;

	if (px->net.es.over == p) /* the partition going out beyond the credit now */
		return true;
	if (p->op->inflight)
		return false;
	for (const struct pbox_handle *op = px->net.es.active; op; op = op->anext)
		if (op->t->prio < t->prio ||
		    (op->t->prio == t->prio && wk_order_key(op->t) < wk_order_key(t)))
			return false;
	px->net.es.over = p;
	return true;
}

/* The counters for pbox_stats(), with the estimators' state; px->mu held. */
void wk_stats_locked(struct pbox *px)
{
	px->net.es.st.rto_ns = px->net.es.rto_ns;
	px->net.es.st.srtt_ns = px->net.es.srtt_ns;
	px->net.es.st.probe_rtt_ns = px->net.es.probe_rtt_ns;
	px->st_pub = px->net.es.st;
}

static void frag_done(struct pbox *px, uint32_t g)
{
	struct wk_frag *f = &px->net.es.frag[g];
	struct pbox_handle *op = f->op;
	uint16_t charge = wk_charge(px, f);
	uint64_t bytes;

	f->state = WK_DONE;
	px->net.es.credit_used -= charge;
	op->inflight -= charge;
	if (!charge && px->net.es.turns_out) /* a turn (flow.c) */
		px->net.es.turns_out--;
	if (!charge && op->turns_out && !--op->turns_out)
		active_del(&px->net.es.tactive, op);
	if (charge && !op->inflight)
		active_del(&px->net.es.active, op);
	if (--op->left)
		return;
	/* What we have queued (peers' results, answers) leaves before the sum's
	 * waiter hears of it: it may end the process at once (a rank done with
	 * its last step), and the batch would go with it, the peers left to
	 * call us dead with their sums one datagram away. */
	wk_tx_flush(px, px->net.es.eng);
	if (px->fail) /* the flush failed: wk_raise() has failed every op */
		return;
	bytes = op->t->bytes;
	pthread_mutex_lock(&px->mu);
	px->net.es.st.ops++;
	wk_op_complete_locked(px, op, PBOX_OK, NULL); /* its waiter may free it from here */
	wk_stats_locked(px);
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
	wk_tune_done(px, bytes, px->net.es.now_ns);
}

/*
 * The retransmission timeout follows the measured time to a sum (RFC 6298's
 * estimator): that time includes waiting for the slowest rank's push, which
 * no retransmission can shorten. The floor is set at start (see there).
 */
static void rtt_sample(struct pbox *px, uint64_t r)
{
	uint64_t rto;

	if (!px->net.es.srtt_ns) {
		px->net.es.srtt_ns = r;
		px->net.es.rttvar_ns = r / 2;
	} else {
		uint64_t d =
			r > px->net.es.srtt_ns ? r - px->net.es.srtt_ns : px->net.es.srtt_ns - r;

		px->net.es.rttvar_ns = (3 * px->net.es.rttvar_ns + d) / 4;
		px->net.es.srtt_ns = (7 * px->net.es.srtt_ns + r) / 8;
	}
	rto = px->net.es.srtt_ns + 4 * px->net.es.rttvar_ns;
	if (rto < px->net.es.rto_min_ns)
		rto = px->net.es.rto_min_ns;
	/* Samples include waits for other ranks' lost pushes, which feed back
	 * into the estimate; past a few floors a premature resend (paced, and
	 * acknowledged) costs less than a stalled sum. */
	if (rto > 4 * px->net.es.rto_min_ns)
		rto = 4 * px->net.es.rto_min_ns;
	if (rto > px->net.es.deadline_ns / 12)
		rto = px->net.es.deadline_ns / 12;
	px->net.es.rto_ns = rto;
}

/*
 * Congestion: the bytes in flight are bounded by the credit and by a window
 * that halves when a fragment times out (at most once per smoothed time to
 * a sum) and grows back, doubling per window up to half the last size, then
 * by a fragment per window. An SS behind a small receive ring (a box port)
 * then sees bursts it can take instead of losing them.
 */
static void cwnd_grow(struct pbox *px, uint32_t len)
{
	if (px->net.es.cwnd >= px->net.es.credit)
		return;
	px->net.es.cwnd += px->net.es.cwnd < px->net.es.ssthresh
				   ? len
				   : (uint64_t)px->net.frag_size * len / px->net.es.cwnd + 1;
}

void wk_cwnd_cut(struct pbox *px, uint64_t now)
{
	uint64_t floor = 16 * (uint64_t)px->net.frag_size;

	if (floor > px->net.es.credit) /* the window stays under the credit */
		floor = px->net.es.credit;

	if (now - px->net.es.cwnd_cut_ns <
	    (px->net.es.srtt_ns ? px->net.es.srtt_ns : px->net.es.rto_min_ns))
		return;
	px->net.es.cwnd_cut_ns = now;
	px->net.es.cwnd = px->net.es.cwnd / 2 > floor ? px->net.es.cwnd / 2 : floor;
	px->net.es.ssthresh = px->net.es.cwnd;
}

/* ---- compressed fragments ([job] compression, comp.h) ------------------------- */

static struct comp_spec comp_of(const struct pbox *px, uint8_t scheme)
{
	return (struct comp_spec){scheme, px->cfg.job.compression_ppm};
}

/* What fragment @f carries compressed with @scheme: its bytes, or their
 * compressed form's. */
static uint16_t wire_len(const struct pbox *px, const struct wk_frag *f, uint8_t scheme)
{
	const struct comp_spec c = comp_of(px, scheme);

	return c.scheme ? (uint16_t)comp_bytes(&c, f->len / 4u) : f->len;
}

/* What this rank's push of fragment @f carries: nothing where its
 * tensor's root alone has data (a broadcast's, an all-gather shard's
 * other ranks: their turn, WIRE.md), else wk_wire_len(). */
uint16_t wk_push_len(const struct pbox *px, const struct wk_frag *f)
{
	const struct wk_tensor *t = f->op->t;

	if (wk_root_sends(t) && px->net.rank != t->root)
		return 0;
	return wire_len(px, f, f->op->comp);
}

/* What the result of fragment @f carries to this rank: nothing where it
 * is not for us (a reduce-scatter shard's other ranks; the root of a
 * broadcast or an all-gather shard, which has its data). */
uint16_t wk_result_len(const struct pbox *px, const struct wk_frag *f)
{
	const struct wk_tensor *t = f->op->t;

	if (t->kind == WK_REDUCE)
		return px->net.rank == t->root ? wire_len(px, f, f->op->rcomp) : 0;
	if (wk_root_sends(t))
		return px->net.rank == t->root ? 0 : wire_len(px, f, f->op->rcomp);
	return wire_len(px, f, f->op->rcomp);
}

/* What fragment @f's push holds of the credit: its bytes, or nothing for
 * an empty push (a rooted tensor's turn: a header, no data in flight). */
uint16_t wk_charge(const struct pbox *px, const struct wk_frag *f)
{
	return wk_push_len(px, f) ? f->len : 0;
}

/* RANDK's seed of fragment @g's round: from what its header says, as the
 * summation service computes it. */
static uint64_t frag_seed(const struct pbox *px, uint32_t g, uint32_t round)
{
	return comp_seed(px->net.job, px->net.chunk_local[g / px->net.fpc], g % px->net.fpc, round);
}

/* Where the fragment at fp32 offset @off is in a push-pull that came
 * compressed with @c (op->pre: the CUDA module's comp_cuda_encode()
 * layout, each fragment at its index times a whole fragment's compressed
 * bytes). */
static uint64_t pre_off(const struct pbox *px, const struct comp_spec *c, uint64_t off)
{
	return off / px->net.frag_size * comp_bytes(c, px->net.frag_size / 4u);
}

/* The engine's scratch for the compressors, made at its first use. */
static void *comp_scratch(struct pbox *px)
{
	if (!px->net.es.comp_scratch)
		px->net.es.comp_scratch = malloc(comp_scratch_bytes(px->net.frag_size / 4u));
	return px->net.es.comp_scratch;
}

/*
 * Fragment @g's compressed push of its round: compressed at its first
 * send, with the tensor's error feedback; a resend sends the same bytes.
 * The slots are laid out once per tensor and incarnation. NULL: out of
 * memory (raised). One that came compressed is its own.
 */
const uint8_t *wk_comp_payload(struct pbox *px, uint32_t g)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	struct wk_tensor *t = f->op->t;
	const struct comp_spec c = comp_of(px, f->op->comp);
	const size_t stride = px->net.frag_size; /* any scheme's fits: its fp32 bytes */
	const uint64_t off = wk_frag_off(px, g, t);
	const uint32_t slot = (uint32_t)(off / px->net.frag_size);
	uint8_t *w;

	if (f->op->pre)
		return f->op->in + pre_off(px, &c, off);
	if (!t->wire) {
		t->wire = malloc((size_t)t->n_chunks * px->net.fpc * stride);
		t->wire_round = calloc((size_t)t->n_chunks * px->net.fpc, sizeof(uint32_t));
	}
	if (!t->wire || !t->wire_round || !comp_scratch(px)) {
		wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0,
			 "out of memory for the compressed pushes of tensor key %" PRIu64, t->key);
		return NULL;
	}
	w = t->wire + (size_t)slot * stride;
	if (t->wire_round[slot] != f->op->round + 1) {
		comp_encode(&c, (const float *)(const void *)(f->op->in + off), t->resid + off / 4,
			    f->len / 4u, w, frag_seed(px, g, f->op->round),
			    px->net.es.comp_scratch);
		t->wire_round[slot] = f->op->round + 1;
	}
	return w;
}

/* A result for our fragment @g: 1 taken, 0 a duplicate or stale. */
int wk_deliver(struct pbox *px, uint32_t g, const void *buf, uint16_t len, uint8_t comp,
	       uint32_t round)
{
	struct wk_frag *f = &px->net.es.frag[g];
	const struct wk_tensor *t;

	/* after a failure the ops are the callers' again (and maybe freed) */
	if (px->fail || f->state != WK_INFLIGHT || f->op->round != round ||
	    len != wk_result_len(px, f) || (len && comp != f->op->rcomp))
		return 0;
	if (f->op->rcomp && !f->op->pre && !comp_scratch(px)) { /* a plain push's sum */
		wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0,
			 "out of memory for the compressed sums of tensor key %" PRIu64,
			 f->op->t->key);
		return 0;
	}
	if (f->tries == 1) { /* Karn: only unambiguous samples */
		uint64_t now = wk_now();

		rtt_sample(px, now > f->pushed ? now - f->pushed : 0);
		cwnd_grow(px, len);
	}
	t = f->op->t;
	if (f->op->pre) { /* the sum as it came: the CUDA module decompresses it */
		const struct comp_spec c = comp_of(px, f->op->rcomp);

		memcpy(f->op->out + pre_off(px, &c, wk_frag_off(px, g, t)), buf, len);
	} else if (f->op->rcomp) { /* the sum, decompressed */
		const struct comp_spec c = comp_of(px, f->op->rcomp);

		comp_decode(&c, (float *)(void *)(f->op->out + wk_frag_off(px, g, t)), buf,
			    f->len / 4u, frag_seed(px, g, round), px->net.es.comp_scratch);
	} else if (len) { /* an empty result: the round done, nothing of it for us */
		memcpy(f->op->out + wk_frag_off(px, g, t), buf, len);
	}
	frag_done(px, g);
	return 1;
}
