/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The progress engine: one thread per context runs the communication
 * service (CS) and this worker's SS_GPU over one UDP socket.
 *
 *   loop:  take new push-pulls (their partitions into the priority heap)
 *          receive a batch: results for us, pushes for our SS_GPU
 *          retransmit what expired (one FIFO per backoff level: only heads
 *          are looked at, no timer per packet)
 *          send new fragments, highest priority first, within the credit
 *          and no faster than the link (pacing)
 *          flush the batch (sendmmsg); read the control connections
 *          nothing to do: ppoll() until the next expiry or pacing slot
 *
 * A fragment whose SS is this worker's own SS_GPU never touches the
 * network: it goes straight into ss_push(), and our own result is copied
 * out of the SS_GPU's buffer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"
#include "wk_handle.h"
#include "wk_fail.h"
#include "wk_link.h"
#include "wk_box.h"
#include "wk_sched.h"
#include "wk_tune.h"
#include "wk_grow.h"
#include "wk_udp.h"
#include "wk_engine.h"

#define WK_RX_DRAIN 64 /* receive batches taken before timers are judged */

/* ---- FIFOs of sent fragments ------------------------------------------- */

static int ring_push(struct wk_ring *r, uint32_t g, uint32_t stamp)
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
static struct wk_frag *ring_head(struct pbox *px, struct wk_ring *r, uint32_t *g)
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

static void tx_flush(struct pbox *px, struct eng *e)
{
	px->net.tp->flush(px->net.tp_st, e);
}

/* One datagram out, through the transport, paced and counted. */
static void tx_add(struct pbox *px, struct eng *e, uint32_t ip_be, uint16_t port,
		   const struct pbox_hdr *h, const void *payload, uint16_t len, bool gso)
{
	px->net.es.st.tx_pkts++;
	px->net.es.st.tx_bytes += len;
	if (px->cfg.tuning.pacing) {
		uint64_t start = px->net.es.tx_clock_ns > px->net.es.now_ns ? px->net.es.tx_clock_ns
									    : px->net.es.now_ns;

		px->net.es.tx_clock_ns = start + ((uint64_t)len + PBOX_HDR_LEN + WK_L2L4_OVERHEAD) *
							 8000000 / px->net.es.pace_kbps;
	}
	px->net.tp->tx(px->net.tp_st, e, ip_be, port, h, payload, len, gso);
}

/* A reply to the sender of @req: an error (@code rides in the slot after
 * the header) or an ACK (no payload). */
static void tx_reply(struct pbox *px, struct eng *e, const struct nic_addr *to,
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
	tx_add(px, e, to->ip_be, to->port, &r, slot, r.len, true);
}

/*
 * Pacing: the link is booked further ahead than a burst. A datagram handed
 * to the kernel sits in the NIC's queue, out of reach of the priority
 * scheduler, and its retransmission timer would run while it waits there.
 * So new sends and resends wait here instead; results still go at once.
 */
static bool link_busy(const struct pbox *px)
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
static bool link_short(const struct pbox *px)
{
	return px->cfg.tuning.pacing && px->net.es.tx_clock_ns + px->net.es.pace_quantum_ns >
						px->net.es.now_ns + px->net.es.pace_burst_ns;
}

/* When the last datagram queued will have left: the time its wait starts. */
static uint64_t departure(const struct pbox *px)
{
	return px->cfg.tuning.pacing && px->net.es.tx_clock_ns > px->net.es.now_ns
		       ? px->net.es.tx_clock_ns
		       : px->net.es.now_ns;
}

/* ---- fragments ---------------------------------------------------------- */

static void active_add(struct pbox *px, struct pbox_handle *op)
{
	op->aprev = NULL;
	op->anext = px->net.es.active;
	if (px->net.es.active)
		px->net.es.active->aprev = op;
	px->net.es.active = op;
}

static void active_del(struct pbox *px, struct pbox_handle *op)
{
	if (op->aprev)
		op->aprev->anext = op->anext;
	else
		px->net.es.active = op->anext;
	if (op->anext)
		op->anext->aprev = op->aprev;
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
static bool beyond_credit(struct pbox *px, struct wk_part *p)
{
	const struct wk_tensor *t = p->op->t;

	if (px->net.es.over == p) /* the partition going out beyond the credit now */
		return true;
	if (p->op->inflight)
		return false;
	for (const struct pbox_handle *op = px->net.es.active; op; op = op->anext)
		if (op->t->prio < t->prio || (op->t->prio == t->prio && op->t->key < t->key))
			return false;
	px->net.es.over = p;
	return true;
}

/* The counters for pbox_stats(), with the estimators' state; px->mu held. */
static void stats_locked(struct pbox *px)
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
	uint64_t bytes;

	f->state = WK_DONE;
	px->net.es.credit_used -= f->len;
	op->inflight -= f->len;
	if (!op->inflight)
		active_del(px, op);
	if (--op->left)
		return;
	/* What we have queued (peers' results, answers) leaves before the sum's
	 * waiter hears of it: it may end the process at once (a rank done with
	 * its last step), and the batch would go with it, the peers left to
	 * call us dead with their sums one datagram away. */
	tx_flush(px, px->net.es.eng);
	if (px->fail) /* the flush failed: wk_raise() has failed every op */
		return;
	bytes = op->t->bytes;
	pthread_mutex_lock(&px->mu);
	px->net.es.st.ops++;
	wk_op_complete_locked(px, op, PBOX_OK, NULL); /* its waiter may free it from here */
	stats_locked(px);
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

static void cwnd_cut(struct pbox *px, uint64_t now)
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

static struct comp_spec comp_of(const struct pbox *px, const struct pbox_handle *op)
{
	return (struct comp_spec){op->comp, px->cfg.job.compression_ppm};
}

/* What fragment @f's push and result carry: its bytes, or its compressed
 * form's. */
static uint16_t wire_len(const struct pbox *px, const struct wk_frag *f)
{
	const struct comp_spec c = comp_of(px, f->op);

	return c.scheme ? (uint16_t)comp_bytes(&c, f->len / 4u) : f->len;
}

/* RANDK's seed of fragment @g's round: from what its header says, as the
 * summation service computes it. */
static uint64_t frag_seed(const struct pbox *px, uint32_t g, uint32_t round)
{
	return comp_seed(px->net.job, px->net.chunk_local[g / px->net.fpc], g % px->net.fpc, round);
}

/*
 * Fragment @g's compressed push of its round: compressed at its first
 * send, with the tensor's error feedback; a resend sends the same bytes.
 * The slots are laid out once per tensor and incarnation. NULL: out of
 * memory (raised).
 */
static const uint8_t *comp_payload(struct pbox *px, uint32_t g)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	struct wk_tensor *t = f->op->t;
	const struct comp_spec c = comp_of(px, f->op);
	const size_t stride = px->net.frag_size; /* any scheme's fits: its fp32 bytes */
	const uint64_t off = wk_frag_off(px, g, t);
	const uint32_t slot = (uint32_t)(off / px->net.frag_size);
	uint8_t *w;

	if (!px->net.es.comp_scratch)
		px->net.es.comp_scratch = malloc(comp_scratch_bytes(px->net.frag_size / 4u));
	if (!t->wire) {
		t->wire = malloc((size_t)t->n_chunks * px->net.fpc * stride);
		t->wire_round = calloc((size_t)t->n_chunks * px->net.fpc, sizeof(uint32_t));
	}
	if (!t->wire || !t->wire_round || !px->net.es.comp_scratch) {
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
static int deliver(struct pbox *px, uint32_t g, const void *buf, uint16_t len, uint32_t round)
{
	struct wk_frag *f = &px->net.es.frag[g];
	const struct wk_tensor *t;

	/* after a failure the ops are the callers' again (and maybe freed) */
	if (px->fail || f->state != WK_INFLIGHT || f->op->round != round || len != wire_len(px, f))
		return 0;
	if (f->tries == 1) { /* Karn: only unambiguous samples */
		uint64_t now = wk_now();

		rtt_sample(px, now > f->pushed ? now - f->pushed : 0);
		cwnd_grow(px, len);
	}
	t = f->op->t;
	if (f->op->comp) { /* the sum, decompressed: its scratch is the push's, made first */
		const struct comp_spec c = comp_of(px, f->op);

		comp_decode(&c, (float *)(void *)(f->op->out + wk_frag_off(px, g, t)), buf,
			    f->len / 4u, frag_seed(px, g, round), px->net.es.comp_scratch);
	} else {
		memcpy(f->op->out + wk_frag_off(px, g, t), buf, len);
	}
	frag_done(px, g);
	return 1;
}

/* A result's header for @rank, signed; @digest: nic_mac_digest() of the
 * result, once for all its receivers. */
static void result_hdr(const struct pbox *px, struct pbox_hdr *h, uint32_t rank, uint32_t chunk,
		       uint16_t frag, const struct ss_out *out, uint64_t digest)
{
	*h = (struct pbox_hdr){.op = PBOX_OP_RESULT,
			       .dtype = out->dtype,
			       .rank = (uint16_t)rank,
			       .job = px->net.job,
			       .chunk = chunk,
			       .frag = frag,
			       .len = out->len,
			       .round = out->round};
	h->mac = nic_mac_hdr(&px->net.mac, h, digest);
}

/* Our SS_GPU completed a round: the sum to every rank, ours by memcpy. */
static void fan_out(struct pbox *px, struct eng *e, const struct ss_job *seg, uint32_t chunk,
		    uint16_t frag, const struct ss_out *out)
{
	uint32_t g = px->net.unit[px->net.self_unit].global[chunk] * px->net.fpc + frag;
	uint64_t digest = nic_mac_digest(&px->net.mac, out->buf, out->len);
	struct pbox_hdr h;

	for (uint32_t r = 0; r < px->net.n; r++) {
		if (r == px->net.rank)
			continue;
		result_hdr(px, &h, r, chunk, frag, out, digest);
		tx_add(px, e, ss_peer(seg, 0, r)->ip_be, ss_peer(seg, 0, r)->port, &h, out->buf,
		       out->len, true);
		px->net.es.st.ssgpu_results += out->len;
	}
	/* ours last: it may complete a sum, and frag_done() sends the batch,
	 * the peers' results in it, before it says so */
	deliver(px, g, out->buf, out->len, out->round);
}

/* Fragment @g was just sent to @un (its push or a probe): into the timer
 * FIFO of its backoff level and the FIFO of that SS, both in send order. */
static void sent_to(struct pbox *px, struct wk_unit *un, uint32_t g)
{
	struct wk_frag *f = &px->net.es.frag[g];

	if (ring_push(&px->net.es.ring[f->level], g, f->stamp) || ring_push(&un->sent, g, f->stamp))
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
		.flags = retrans ? PBOX_F_RETRANS : 0,
		.rank = (uint16_t)px->net.rank,
		.job = px->net.job,
		.chunk = px->net.chunk_local[c],
		.frag = (uint16_t)(g % px->net.fpc),
		.len = op == PBOX_OP_PUSH ? wire_len(px, f) : 0,
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
	tx_add(px, e, un->ip_be, un->port, &h, none, 0, false);
	f->sent = departure(px);
	f->probed = 1;
	f->probes++;
	px->net.es.st.probes++;
	sent_to(px, un, g);
}

static void push_frag(struct pbox *px, struct eng *e, uint32_t g, bool retrans)
{
	struct wk_frag *f = &px->net.es.frag[g];
	uint32_t c = g / px->net.fpc, u = px->net.chunk_unit[c];
	const struct wk_tensor *t = f->op->t;
	const uint8_t *payload = f->op->comp || f->op->flush ? comp_payload(px, g)
							     : f->op->in + wk_frag_off(px, g, t);
	struct pbox_hdr h = frag_hdr(px, g, PBOX_OP_PUSH, retrans);

	if (!payload)
		return;
	h.mac = nic_mac_of(&px->net.mac, &h, payload);
	f->stamp = ++px->net.es.stamp;
	if (u == px->net.self_unit) {
		/* our own push to our own SS_GPU: from our own address */
		const struct nic_addr self = {.ip_be = px->net.unit[px->net.self_unit].ip_be,
					      .port = px->net.unit[px->net.self_unit].port};
		struct ss_job *seg = ss_job_seg(px->net.es.ssj, 0, h.chunk);
		struct ss_out out = {.why = SS_DROP_CHUNK};

		px->net.es.st.ssgpu_summed += f->len;
		switch (seg ? ss_push(seg, 0, &h, payload, &self, &out) : SS_DROP) {
		case SS_SUMMED:
			if (ring_push(&px->net.es.local, g, f->stamp))
				wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0,
					 "out of memory for the send FIFOs");
			break;
		case SS_COMPLETE:
			fan_out(px, e, seg, h.chunk, h.frag, &out);
			break;
		default:
			wk_raise(px, WK_FK_LOCAL, PBOX_EINVAL, 0,
				 "tensor key %" PRIu64 ": our own SS_GPU refused our push: %s",
				 t->key, ss_drop_name(out.why));
			break;
		}
		return;
	}
	tx_add(px, e, px->net.unit[u].ip_be, px->net.unit[u].port, &h, payload, h.len,
	       px->net.unit[u].rank >= 0);
	f->sent = f->pushed = departure(px);
	f->probed = 0;
	f->acked = 0;
	f->probes = 0;
	px->net.unit[u].tx += h.len;
	if (retrans) {
		px->net.unit[u].retrans++;
		px->net.es.st.retransmits++;
	}
	sent_to(px, &px->net.unit[u], g);
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

static void fail_local(struct pbox *px, uint32_t g, uint64_t now)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	uint32_t c = g / px->net.fpc;
	const struct ss_job *seg = ss_job_seg(px->net.es.ssj, 0, px->net.chunk_local[c]);
	uint32_t idx = seg->ep_first[0] + (px->net.chunk_local[c] - seg->ep_base[0]) * px->net.fpc +
		       g % px->net.fpc;
	const uint64_t *bits = &seg->bitmap[(size_t)idx * seg->words];
	char who[256] = "", name[96];
	size_t off = 0;
	unsigned missing = 0;

	for (uint32_t r = 0; r < px->net.n && off < sizeof(who) - 96; r++)
		if (!(bits[r / 64] >> (r % 64) & 1) && missing++ < 4)
			off += (size_t)snprintf(who + off, sizeof(who) - off, "%s%s",
						missing > 1 ? ", " : "",
						wk_peer_name(px, r, name, sizeof(name)));
	wk_raise(px, WK_FK_TIMEOUT, 0, 0,
		 "this rank's SS_GPU got no push from %s%s for tensor key %" PRIu64
		 " (round %u) in %.1f s",
		 who[0] ? who : "a peer", missing > 4 ? " and others" : "", f->op->t->key,
		 f->op->round, (double)(now - f->first) / 1e9);
}

/* ---- the loop's steps ----------------------------------------------------- */

/* New push-pulls: into the heap, or parked until their tensor is agreed. */
static void take_new(struct pbox *px)
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

/* New fragments, the most urgent partition first, while credit lasts. */
static int send_new(struct pbox *px, struct eng *e, uint64_t now)
{
	int sent = 0;

	if (link_short(px))
		return 0;
	while (px->net.es.heap_n && !px->fail && !link_busy(px)) {
		struct wk_part *p = px->net.es.heap[0];
		struct wk_frag *f;
		uint32_t g = p->g;

		if (px->net.es.credit_used >= px->net.es.cwnd && !beyond_credit(px, p))
			break;

		if (g == p->g_end ||
		    !px->net.es.frag[g].len) { /* only a tail chunk's empty frags */
			p->g = p->g_end;
			wk_heap_pop(px);
			continue;
		}
		/* Leave the heap before the last send: a push to our own SS_GPU can
		 * complete the op at once, and its waiter frees the partitions. */
		while (++p->g < p->g_end && !px->net.es.frag[p->g].len)
			;
		if (p->g == p->g_end)
			wk_heap_pop(px);
		f = &px->net.es.frag[g];
		f->state = WK_INFLIGHT;
		f->tries = 1;
		f->level = 0;
		f->first = f->sent = f->pushed = now;
		px->net.es.credit_used += f->len;
		if (px->net.es.credit_used > px->net.es.st.max_inflight)
			px->net.es.st.max_inflight = px->net.es.credit_used;
		if (!f->op->inflight)
			active_add(px, f->op);
		f->op->inflight += f->len;
		push_frag(px, e, g, false); /* may free f->op: the last use */
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

static int retransmit(struct pbox *px, struct eng *e, uint64_t now)
{
	int sent = 0;
	uint32_t g;

	for (unsigned l = 0; l < WK_LEVELS && !px->fail; l++) {
		struct wk_frag *f;

		uint64_t wait = backoff(px, l);

		while (!px->fail && !link_busy(px) &&
		       (f = ring_head(px, &px->net.es.ring[l], &g)) && now >= f->sent &&
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
				cwnd_cut(px, now);
			f->tries++;
			push_frag(px, e, g, true);
			sent++;
		}
	}
	if (!px->fail && px->net.es.ssj) {
		struct wk_frag *f = ring_head(px, &px->net.es.local, &g);

		if (f && now - f->first >= px->net.es.deadline_ns)
			fail_local(px, g, now);
	}
	return sent;
}

/* The next expiry among the FIFO heads, or the next pacing slot when
 * something waits for one, in ns from @now (capped). */
static uint64_t next_expiry(struct pbox *px, uint64_t now, uint64_t cap)
{
	uint64_t best = cap;
	uint32_t g;

	if (link_short(px)) {
		uint64_t slot = px->net.es.tx_clock_ns + px->net.es.pace_quantum_ns -
				px->net.es.pace_burst_ns - now;

		if (px->net.es.heap_n && slot < best)
			best = slot;
	}

	bool waiting = false;

	for (unsigned l = 0; l < WK_LEVELS; l++) {
		struct wk_frag *f = ring_head(px, &px->net.es.ring[l], &g);

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

static void on_push(struct pbox *px, struct eng *e, const struct pbox_hdr *h, const uint8_t *p,
		    const struct sockaddr_in *from)
{
	struct nic_addr src = {.ip_be = from->sin_addr.s_addr, .port = ntohs(from->sin_port)};
	struct ss_job *seg = ss_job_seg(px->net.es.ssj, 0, h->chunk);
	enum ss_verdict v;
	struct ss_out out;

	/* a chunk past what we have laid out: a tensor the others have agreed
	 * on, before we read rank 0's GREW; their resend will find it */
	if (!seg && h->chunk >= px->net.unit[px->net.self_unit].n_chunks)
		return;
	if (!seg)
		seg = px->net.es.ssj;
	if (!seg)
		return;
	v = ss_push(seg, 0, h, p, &src, &out);
	px->net.es.st.ssgpu_needless += out.needless;
	switch (v) {
	case SS_SUMMED:
		px->net.es.st.ssgpu_summed += h->len;
		break;
	case SS_COMPLETE:
		px->net.es.st.ssgpu_summed += h->len;
		fan_out(px, e, seg, h->chunk, h->frag, &out);
		break;
	case SS_ANSWER: {
		struct pbox_hdr r;

		result_hdr(px, &r, h->rank, h->chunk, h->frag, &out,
			   nic_mac_digest(&px->net.mac, out.buf, out.len));
		tx_add(px, e, src.ip_be, src.port, &r, out.buf, out.len, true);
		px->net.es.st.ssgpu_results += out.len;
		break;
	}
	case SS_WAITING:
	case SS_NACK:
	case SS_DONE:
		px->net.es.st.nacks_sent += v == SS_NACK;
		tx_reply(px, e, &src, h,
			 v == SS_WAITING ? PBOX_OP_ACK
			 : v == SS_NACK	 ? PBOX_OP_NACK
					 : PBOX_OP_DONE,
			 0);
		break;
	case SS_DROP: {
		uint16_t err;
		uint8_t op = ss_reply_of(out.why, &err);

		if (op)
			tx_reply(px, e, &src, h, op, err);
		break;
	}
	}
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
 * the SS says whether to resend). Ranks do not always send in one order (a
 * tensor that arrives later with a higher priority preempts one already
 * going out, at a different point on each rank): hence probe_due()'s
 * backoff once the SS has our part. Results of resent fragments say nothing
 * of order.
 */
static void overtaken(struct pbox *px, struct eng *e, struct wk_unit *un, uint64_t pushed,
		      uint64_t now)
{
	struct wk_frag *f;
	uint32_t g;

	for (unsigned i = 0; i < 8 && (f = ring_head(px, &un->sent, &g)) && f->sent < pushed; i++) {
		if (!probe_due(px, f, now))
			return; /* the FIFO is in send order: the rest were sent later */
		un->sent.head++;
		px->net.es.st.fast_probes++;
		probe_frag(px, e, g, false);
	}
}

/*
 * Tail losses: a lost push or result with nothing sent after it to the same
 * SS is overtaken by nothing. When an SS has sent us nothing for two probe
 * gaps and our oldest fragment there has waited as long, probe that one
 * (TCP's tail loss probe). While the SS only waits for a slow rank, that is
 * a header and an ACK per interval, backing off.
 */
static void tail_probe(struct pbox *px, struct eng *e, uint64_t now)
{
	uint64_t w = 2 * probe_gap(px);

	if (now < px->net.es.tail_next_ns)
		return;
	px->net.es.tail_next_ns = now + w / 2;
	for (uint32_t u = 0; u < px->net.n_units && !px->fail; u++) {
		struct wk_unit *un = &px->net.unit[u];
		struct wk_frag *f;
		uint32_t g;

		if (u == px->net.self_unit || !(f = ring_head(px, &un->sent, &g)) ||
		    now < f->sent || now - f->sent < w || now - un->heard_ns < w ||
		    !probe_due(px, f, now) || link_busy(px))
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
	probe_answered(px, &px->net.es.frag[g], now);
	probe_frag(px, e, g, true);
}

static void on_result(struct pbox *px, struct eng *e, const struct pbox_hdr *h, const uint8_t *p,
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
	{
		const struct wk_frag *f = &px->net.es.frag[g];
		uint64_t pushed = f->pushed;
		bool clean = f->state == WK_INFLIGHT && f->tries == 1;

		if (!deliver(px, g, p, h->len, h->round) || px->fail) /* fail: the flush */
			return;
		un->rx += h->len;
		if (clean)
			overtaken(px, e, un, pushed, now);
	}
}

/* One received datagram, pbox header first (from the socket or, through
 * the DPDK transport, from a frame); @arg is the engine's struct eng. */
static void on_datagram(void *ctx, void *arg, const uint8_t *b, size_t len,
			const struct sockaddr_in *from, uint64_t now)
{
	struct pbox *px = ctx;
	struct eng *e = arg;
	const struct nic_wire_expect exp = {.max_payload = (uint16_t)px->net.frag_size,
					    .accept_ops = PBOX_OPS_TO_SS | PBOX_OPS_TO_WORKER};
	struct pbox_hdr h;

	px->net.es.st.rx_pkts++;
	if (nic_wire_parse_hdr(b, len, &exp, &h) != NIC_DROP_NONE || h.job != px->net.job)
		return;
	px->net.es.st.rx_bytes += h.len;
	if (h.op == PBOX_OP_PUSH || h.op == PBOX_OP_PROBE)
		on_push(px, e, &h, b + PBOX_HDR_LEN, from);
	else if (!px->fail)
		on_result(px, e, &h, b + PBOX_HDR_LEN, from, now);
}

static int receive(struct pbox *px, struct eng *e, uint64_t now)
{
	return px->net.tp->rx(px->net.tp_st, on_datagram, e, now);
}

/* ---- control connections: lost ranks, the finalize barrier ---------------- */

static void lost(struct pbox *px, uint32_t r, const char *how)
{
	char name[96];

	wk_peer_name(px, r, name, sizeof(name));
	/* rank 0 tells the others first: once this rank's calls fail, its
	 * process may exit at once, and they would blame rank 0 instead */
	if (px->net.rank == 0)
		for (uint32_t q = 1; q < px->net.n; q++)
			if (q != r && px->net.peer_fd[q] >= 0)
				RP_SEND(px->net.peer_fd[q], LOST, lost, .rank = r, .why = how);
	if (px->net.rank == 0 &&
	    px->net.peer_fd[r] >= 0) { /* silent: finalize waits for it no more */
		close(px->net.peer_fd[r]);
		px->net.peer_fd[r] = -1;
	}
	/* gone, and told by LOST: pbox_shrink() leaves it out */
	wk_raise(px, WK_FK_RANK_LOST, 0, r, "%s left the job (%s)", name, how);
	if (px->net.rank == 0) /* the job is over: its memory back to the boxes */
		wk_boxes_close(px, false);
}

/*
 * A failure known to one rank reaches every rank at once, with its cause:
 * a rank tells rank 0 (FAIL <origin> <code> <message>), rank 0 tells every
 * other rank, and each fails with "rank R says: ...". Without this, when
 * pboxd went away only rank 0 (which holds the box's control connection)
 * knew; the others waited for their deadline and then blamed rank 0. A lost
 * rank is told by LOST instead, a disagreement found by rank 0 by its own
 * lines (their kinds are told as they are raised: wk_fail_kinds[]); only a
 * rank's first failure is told, and a told one is not told back.
 */
static void tell_failure(struct pbox *px, uint32_t from)
{
	if (px->net.rank == 0) {
		for (uint32_t q = 1; q < px->net.n; q++)
			if (q != from && px->net.peer_fd[q] >= 0)
				RP_SEND(px->net.peer_fd[q], FAIL, fail, .origin = from,
					.code = px->fail, .why = px->fail_msg);
	} else if (from == px->net.rank && px->net.peer_fd[0] >= 0) {
		RP_SEND(px->net.peer_fd[0], FAIL, fail, .origin = from, .code = px->fail,
			.why = px->fail_msg);
	}
}

/*
 * This rank leaves the job (local aggregation: its machine lost one of its
 * ranks, and a machine goes on whole or not at all): the others are to
 * count it gone, as if its process had died, and go on without it after
 * pbox_shrink(). Rank 0 is told (LEAVE), and tells the others as it tells
 * a lost rank; rank 0 itself tells every other that rank 0 is lost.
 */
static void tell_leaving(struct pbox *px)
{
	if (px->net.rank != 0 && px->net.peer_fd[0] >= 0)
		RP_SEND(px->net.peer_fd[0], LEAVE, leave, .why = px->fail_msg);
	for (uint32_t q = 1; px->net.rank == 0 && q < px->net.n; q++)
		if (px->net.peer_fd[q] >= 0)
			RP_SEND(px->net.peer_fd[q], LOST, lost, .rank = 0, .why = px->fail_msg);
}

/* FAIL from rank @r's connection: fail as the origin did, named. */
static void told_failure(struct pbox *px, uint32_t r, const struct rp_fail *f)
{
	int code = f->code;

	if (px->fail || f->origin >= px->net.n || (px->net.rank != 0 && r != 0) ||
	    (px->net.rank == 0 && f->origin != r))
		return;
	if (code >= 0 || code < PBOX_ENODEV)
		code = PBOX_EFAILED;
	wk_raise(px, WK_FK_HEARD, code, f->origin, "rank %u says: %s",
		 wk_local_world_rank(px, f->origin), f->why);
}

/*
 * Heartbeats: every bootstrap connection carries a line at least every
 * [tuning] heartbeat / 4 both ways (rank 0 to each rank, each rank to rank
 * 0). A process that dies closes its connections at once; a host that
 * crashes or is cut off closes nothing, and its connection falls silent:
 * rank 0 names that rank to every other after [tuning] heartbeat (LOST),
 * and a rank that hears nothing from rank 0 names rank 0. Far sooner than
 * the data deadline, and it does not depend on data being in flight.
 */
static void heartbeat(struct pbox *px, uint64_t now)
{
	uint64_t limit = px->cfg.tuning.heartbeat_us * 1000;
	char name[96];

	if (!limit || px->fail || px->net.n == 1)
		return;
	if (!px->net.hb_sent_ns) { /* the engine's first turn: everyone heard now */
		for (uint32_t r = 0; r < px->net.n; r++)
			px->net.peer_heard[r] = now;
	}
	if (now - px->net.hb_sent_ns >= limit / 4) {
		for (uint32_t r = 0; r < px->net.n; r++)
			if (px->net.peer_fd[r] >= 0 && (px->net.rank == 0) != (r == 0))
				rp_send_verb(px->net.peer_fd[r], RP_HB);
		px->net.hb_sent_ns = now;
	}
	for (uint32_t r = 0; r < px->net.n; r++) {
		double s = (double)(now - px->net.peer_heard[r]) / 1e9;

		if (px->net.peer_fd[r] < 0 || px->net.peer_bye[r] ||
		    now - px->net.peer_heard[r] <= limit)
			continue;
		if (px->net.rank == 0) {
			char how[128];

			snprintf(how, sizeof(how),
				 "silent for %.1f s: its host crashed or was cut off", s);
			lost(px, r, how);
		} else { /* gone: pbox_shrink() leaves it out */
			wk_raise(
				px, WK_FK_SILENT, 0, 0,
				"%s fell silent for %.1f s: its host crashed or was cut off (or this "
				"one was)",
				wk_peer_name(px, 0, name, sizeof(name)), s);
		}
		return;
	}
}

/* One control line from rank @r's connection. A line this rank cannot
 * read fails the job (the ranks proved they run one job: a garbled line is
 * a fault, not something to guess at); one of a verb this rank is not
 * party to is dropped. */
static void control_line(struct pbox *px, uint32_t r, char *line)
{
	char err[160];
	struct rp_msg m;

	if (rp_parse(line, &m, err, sizeof(err))) {
		wk_raise(px, WK_FK_PROTOCOL, 0, 0, "rank %u sent a line this rank cannot read: %s",
			 wk_local_world_rank(px, r), err);
		return;
	}
	switch (m.verb) {
	case RP_HB: /* a heartbeat: heard */
		break;
	case RP_BYE:
		px->net.peer_bye[r] = true;
		if (px->net.rank != 0)
			px->net.es.bye_done = true;
		break;
	case RP_LOST:
		if (px->net.rank != 0 && m.lost.rank < px->net.n)
			lost(px, m.lost.rank, m.lost.why); /* as rank 0 saw it */
		break;
	case RP_REJOIN:
		if (px->net.rank != 0 || r == 0)
			break;
		px->net.peer_bye[r] = true; /* its connection closes next, not lost */
		pthread_mutex_lock(&px->mu);
		px->rejoins++;
		pthread_cond_broadcast(&px->cv);
		pthread_mutex_unlock(&px->mu);
		break;
	case RP_LEAVE:
		if (px->net.rank == 0 && r != 0)
			lost(px, r, m.leave.why); /* its machine lost a rank: it is gone */
		break;
	case RP_FAIL:
		told_failure(px, r, &m.fail);
		break;
	default:
		wk_grow_line(px, r, &m); /* a new tensor's agreement, or nothing */
		break;
	}
}

/* Every rank's connection: its lines, and whether it closed. */
static void peers_poll(struct pbox *px, uint64_t now)
{
	char line[RP_LINE_MAX];

	for (uint32_t r = 0; r < px->net.n; r++) {
		int fd = px->net.peer_fd[r], rc = 0;

		while (fd >= 0 && (rc = wk_line_poll(fd, px->net.peer_buf[r], &px->net.peer_len[r],
						     WK_LINEBUF, line, sizeof(line))) == 1) {
			px->net.peer_heard[r] = now;
			control_line(px, r, line);
		}
		if (fd >= 0 && rc < 0) {
			close(fd);
			px->net.peer_fd[r] = -1;
			if (!px->net.peer_bye[r] && !(px->net.rank != 0 && px->net.es.bye_done))
				lost(px, r,
				     px->net.rank == 0 ? "its connection to rank 0 closed"
						       : "our connection to it closed");
			if (px->net.rank != 0)
				px->net.es.bye_done = true;
		}
	}
}

/* The boxes' control connections: a box that closed or timed out its
 * connection, or that says it knows the job no more, fails the job. */
static void boxes_poll(struct pbox *px, uint64_t now)
{
	/* a growth under way: the box client's thread has their connections */
	for (uint32_t b = 0; b < px->net.n_boxes && !px->net.es.grow_ts; b++) {
		struct wk_box *bx = &px->net.box[b];
		char buf[256], ip[INET_ADDRSTRLEN];
		ssize_t got;

		if (bx->fd < 0)
			continue;
		got = recv(bx->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (got > 0 ||
		    (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
			continue;
		close(bx->fd);
		bx->fd = -1;
		wk_ipstr(bx->addr.ip_be, ip);
		/* gone, the failure's cause: pbox_shrink() leaves it out */
		if (got < 0 && errno == ETIMEDOUT) /* keepalive: wk_tcp_dead_after() */
			wk_raise(
				px, WK_FK_BOX_LOST, 0, b,
				"the box at %s:%u: its control connection timed out (no answer for "
				"%.1f s): pboxd's host crashed or was cut off",
				ip, bx->addr.port, (double)px->cfg.tuning.heartbeat_us / 1e6);
		else
			wk_raise(px, WK_FK_BOX_LOST, 0, b,
				 "the box at %s:%u closed its control connection: pboxd went away",
				 ip, bx->addr.port);
	}
	if (px->net.es.nojob_since && now - px->net.es.nojob_since > 500000000ull)
		wk_raise(px, WK_FK_BOX_LOST, 0, UINT32_MAX,
			 "the box says job %u is not registered: pboxd restarted, or the job was "
			 "unregistered",
			 px->net.job);
}

/* pbox_finalize()'s barrier: each rank says BYE to rank 0, which answers
 * every rank once all have (or are gone), up to the deadline. */
static void finalize_barrier(struct pbox *px, uint64_t now)
{
	if (!px->net.es.bye_deadline)
		px->net.es.bye_deadline = now + px->net.es.deadline_ns;
	if (px->net.n == 1) {
		px->net.es.bye_done = true;
	} else if (px->net.rank != 0) {
		if (!px->net.es.bye_sent && px->net.peer_fd[0] >= 0)
			rp_send_verb(px->net.peer_fd[0], RP_BYE);
		px->net.es.bye_sent = true;
		if (px->net.peer_fd[0] < 0)
			px->net.es.bye_done = true;
	} else {
		bool all = true;

		for (uint32_t r = 1; r < px->net.n; r++)
			all &= px->net.peer_bye[r] || px->net.peer_fd[r] < 0;
		if (all) {
			for (uint32_t r = 1; r < px->net.n; r++)
				if (px->net.peer_fd[r] >= 0)
					rp_send_verb(px->net.peer_fd[r], RP_BYE);
			px->net.es.bye_done = true;
		}
	}
	if (!px->net.es.bye_done && now >= px->net.es.bye_deadline) {
		wk_log(px, CFG_LOG_WARNING,
		       "finalize: not every rank said BYE within the deadline");
		px->net.es.bye_done = true;
	}
	if (px->net.es.bye_done && px->net.rank == 0)
		wk_boxes_close(px, true);
}

/* A failure raised here, or heard on rank 0 from another rank, to the
 * ranks that do not know it yet, by the line its kind says (FAIL or
 * LEAVE); then TOLD. */
static void tell(struct pbox *px)
{
	enum wk_fkind kind;
	uint32_t from;
	bool due;

	pthread_mutex_lock(&px->mu);
	due = px->fstate == WK_FS_FAILED;
	kind = px->fail_kind;
	from = px->fail_from == UINT32_MAX ? px->net.rank : px->fail_from;
	pthread_mutex_unlock(&px->mu);
	if (!due)
		return;
	if (wk_fail_kinds[kind].verb == RP_LEAVE)
		tell_leaving(px);
	else
		tell_failure(px, from);
	wk_fail_told(px);
}

/* The control side of one engine turn: the ranks' lines, the boxes'
 * connections, REJOIN, heartbeats, telling a failure, the BYE barrier. */
static void control(struct pbox *px, uint64_t now, bool finalizing)
{
	peers_poll(px, now);
	boxes_poll(px, now);
	if (px->net.rank != 0 && px->net.peer_fd[0] >= 0) { /* pbox_rejoin(): REJOIN, once */
		pthread_mutex_lock(&px->mu);
		if (px->rejoin_req && !px->rejoin_sent) {
			rp_send_verb(px->net.peer_fd[0], RP_REJOIN);
			px->rejoin_sent = true;
			pthread_cond_broadcast(&px->cv);
		}
		pthread_mutex_unlock(&px->mu);
	}
	heartbeat(px, now);
	tell(px); /* before this rank's caller can exit */
	if (finalizing)
		finalize_barrier(px, now);
}

/* ---- stats -------------------------------------------------------------------- */

static void publish(struct pbox *px, uint64_t now)
{
	pthread_mutex_lock(&px->mu);
	stats_locked(px);
	for (uint32_t u = 0; u < px->net.n_units; u++) {
		const struct wk_unit *un = &px->net.unit[u];
		struct pbox_ss_stats *s = &px->net.ss_pub[u];

		snprintf(s->name, sizeof(s->name), "%s", un->name);
		s->chunks = un->n_chunks;
		s->bytes = un->bytes;
		s->tx = un->tx;
		s->rx = un->rx;
		s->retrans = un->retrans;
	}
	px->tune_pub = (struct pbox_tuning){
		.credit_bytes = px->net.es.credit,
		.partition_bytes = px->net.es.part_bytes,
		.converged = px->net.es.tune.phase == WK_TUNE_DONE,
		.windows = px->net.es.tune.windows,
		.goodput_first_mbps = px->net.es.tune.first * 1e3,
		.goodput_best_mbps = px->net.es.tune.best * 1e3,
	};
	pthread_mutex_unlock(&px->mu);
	px->net.es.published_ns = now;
}

/* ---- the thread ---------------------------------------------------------------- */

static void *engine(void *arg)
{
	struct pbox *px = arg;
	struct eng *e = px->net.es.eng;

	wk_mark_engine_thread();

	for (;;) {
		uint64_t now = px->net.es.now_ns = wk_now();
		int work = 0;
		bool fin, ab;

		pthread_mutex_lock(&px->mu);
		fin = px->finalizing;
		ab = px->aborting || px->aborted;
		pthread_mutex_unlock(&px->mu);
		if (px->fail && !px->net.es.eng_failed) /* raised on another thread */
			wk_fail_ops(px);
		if (ab) /* pbox_shrink() or pbox_abort(): it ends here, no BYE */
			break;
		if (fin && !px->fail) {
			/* whatever is still in flight ends here */
			pthread_mutex_lock(&px->mu);
			wk_fail_all_locked(px, PBOX_EFAILED,
					   "pbox_finalize() was called while it was in flight");
			pthread_mutex_unlock(&px->mu);
			px->net.es.heap_n = 0;
			px->net.es.over = NULL;
			px->net.es.active = NULL;
		}
		if (!px->fail) {
			take_new(px);
			wk_grow_poll(px);
		}
		/* Whatever has arrived is taken in before any timer is judged: after
		 * this thread was off the CPU, a result waiting in the socket (or the
		 * port's ring) must not look lost and be asked for again. */
		for (unsigned b = 0; b < WK_RX_DRAIN; b++) {
			int got = receive(px, e, now);

			work += got;
			if (got < WK_BATCH)
				break;
		}
		if (!px->fail) {
			work += retransmit(px, e, now);
			tail_probe(px, e, now);
			work += send_new(px, e, now);
			wk_tune_turn(px, now);
		}
		tx_flush(px, e);
		if (fin ||
		    now - px->net.es.control_ns > 2000000ull) { /* a syscall per connection */
			control(px, now, fin);
			px->net.es.control_ns = now;
		}
		if (now - px->net.es.published_ns > 20000000ull)
			publish(px, now);
		if (fin && px->net.es.bye_done)
			break;
		if (!work) {
			struct pollfd p[2] = {{.fd = px->net.udp, .events = POLLIN},
					      {.fd = px->net.efd, .events = POLLIN}};
			/* a DPDK port has no descriptor to wait on: nap briefly */
			uint64_t cnt, wait_ns = next_expiry(px, now,
							    px->net.tp->nap_ns ? px->net.tp->nap_ns
							    : fin	       ? 5000000ull
									       : 20000000ull);
			struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
					      .tv_nsec = (long)(wait_ns % 1000000000ull)};

			if (wait_ns && ppoll(p, 2, &ts, NULL) > 0 && (p[1].revents & POLLIN) &&
			    read(px->net.efd, &cnt, sizeof(cnt)) < 0) {
				/* nothing: the counter was read by an earlier wake-up */
			}
		}
	}
	publish(px, wk_now());
	return NULL;
}

/*
 * The progress thread, at real-time priority when [tuning] priority asks.
 * It paces our sends to the microsecond: a thread kept off the CPU for a
 * few milliseconds leaves the link idle for as long, time an evenly loaded
 * layout never makes up. On a host whose cores are shared (the emulated
 * cluster: the ranks and a box on 2 cores, where the kernel's memory
 * monitor, kdamond, takes a core for 5-20 ms twice a second), Fig. 12 at n
 * = 4, k = 0 lost 3-7% to such waits at the default priority, 1.4-1.6% at
 * priority 10.
 */
static int start_thread(struct pbox *px)
{
	pthread_attr_t a;
	struct sched_param sp = {.sched_priority = (int)px->cfg.tuning.priority};
	int err;

	if (!sp.sched_priority)
		err = pthread_create(&px->thr, NULL, engine, px);
	else if ((err = pthread_attr_init(&a)) == 0) {
		if (!(err = pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED)) &&
		    !(err = pthread_attr_setschedpolicy(&a, SCHED_FIFO)) &&
		    !(err = pthread_attr_setschedparam(&a, &sp)))
			err = pthread_create(&px->thr, &a, engine, px);
		pthread_attr_destroy(&a);
	}
	if (err == EPERM && sp.sched_priority)
		return wk_err(PBOX_EINVAL,
			      "pbox_start: [tuning] priority = %d: cannot run the progress thread "
			      "at that real-time priority: %s (it needs CAP_SYS_NICE or an "
			      "rtprio limit; 0 keeps the default scheduling)",
			      sp.sched_priority, strerror(err));
	if (err)
		return wk_err(PBOX_ENOMEM, "pbox_start: cannot start the progress thread: %s",
			      strerror(err));
	return PBOX_OK;
}

int wk_engine_start(struct pbox *px)
{
	struct eng *e = wk_udp_batch_new(px);
	int rc;

	px->net.es.eng = e;
	px->net.ss_pub = calloc(px->net.n_units, sizeof(*px->net.ss_pub));
	px->net.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!e || !px->net.ss_pub || px->net.efd < 0) {
		wk_udp_batch_free(e);
		px->net.es.eng = NULL;
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	}
	if (px->net.tp->ready && px->net.tp->ready(px->net.tp_st, 3000000000ull)) {
		wk_udp_batch_free(e);
		px->net.es.eng = NULL;
		return PBOX_ENOMEM;
	}
	px->net.es.part_bytes = px->cfg.tuning.partition_size;
	wk_set_credit(px, px->cfg.tuning.credit_bytes); /* and the timeout, at its floor */
	px->net.es.deadline_ns = px->cfg.tuning.deadline_us * 1000;
	/* a burst: 64 KiB of link time or half a millisecond, the longer (the
	 * thread cannot count on waking up more precisely than that) */
	px->net.es.pace_burst_ns = 64 * 1024 * 8000000ull / px->net.es.pace_kbps;
	if (px->net.es.pace_burst_ns < 500000)
		px->net.es.pace_burst_ns = 500000;
	px->net.es.pace_quantum_ns =
		32 * 1024 * 8000000ull / px->net.es.pace_kbps; /* a chunk's worth */
	if (px->net.es.pace_quantum_ns > px->net.es.pace_burst_ns / 2)
		px->net.es.pace_quantum_ns = px->net.es.pace_burst_ns / 2;
	publish(px, wk_now());
	px->net.es.eng_failed = false;
	pthread_mutex_lock(&px->mu);
	px->eng_live = true; /* from now on a failure raised elsewhere leaves its ops to it */
	pthread_mutex_unlock(&px->mu);
	rc = start_thread(px);
	if (rc) {
		pthread_mutex_lock(&px->mu);
		px->eng_live = false;
		pthread_mutex_unlock(&px->mu);
		wk_udp_batch_free(e);
		px->net.es.eng = NULL;
		return rc;
	}
	px->thr_started = true;
	return PBOX_OK;
}

void wk_engine_join(struct pbox *px)
{
	struct eng *e = px->net.es.eng;
	bool now;

	pthread_join(px->thr, NULL);
	pthread_mutex_lock(&px->mu);
	px->eng_live = false;
	now = px->aborting || px->aborted || px->fail;
	pthread_mutex_unlock(&px->mu);
	wk_box_client_stop(px, now);
	if (px->fail && !px->net.es.eng_failed) /* raised as it stopped: its ops fail here */
		wk_fail_ops(px);
	px->thr_started = false;
	wk_udp_batch_free(e);
	px->net.es.eng = NULL;
}
