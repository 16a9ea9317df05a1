/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * This rank's SS_GPU (BytePS's summation service on a worker): pushes from
 * the other ranks and from ourselves summed in the shared SS core (ss.h),
 * a completed round's sum fanned out to every rank by reference (one MAC
 * digest for all), probes answered, and a round that waits too long for
 * another rank's push named. The engine thread's alone.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"
#include "wk_fail.h"
#include "wk_frag.h"
#include "wk_serve.h"

/* A result's header for @rank, signed; @digest: nic_mac_digest() of what
 * it carries to @rank (ss_out_len()), once for all its receivers; @flags:
 * PBOX_F_REST, an empty result for the whole chunk. */
static void result_hdr(const struct pbox *px, struct pbox_hdr *h, uint32_t rank, uint32_t chunk,
		       uint16_t frag, const struct ss_out *out, uint64_t digest, uint8_t flags)
{
	*h = (struct pbox_hdr){.op = PBOX_OP_RESULT,
			       .dtype = out->dtype,
			       .flags = flags,
			       .rank = (uint16_t)rank,
			       .job = px->net.job,
			       .chunk = chunk,
			       .frag = frag,
			       .len = ss_out_len(out, rank),
			       .round = ss_out_round(out, rank)};
	h->mac = nic_mac_hdr(&px->net.mac, h, digest);
}

/* What a completed fragment sends a reduce's other ranks, whose results
 * are empty: nothing until its whole chunk is complete, then one empty
 * result flagged PBOX_F_REST for the chunk (a header a chunk, not one a
 * fragment: 0.9% of what a reduce-scatter's links carry at 8 KiB
 * fragments). Every other empty result goes as it is. Returns the flags
 * of an empty result, or -1: none yet. */
static int empty_flags(const struct ss_job *seg, uint32_t chunk, uint16_t frag,
		       const struct ss_out *out)
{
	if (out->mode != SS_REDUCE)
		return 0;
	return ss_chunk_done(seg, ss_frag_of(seg, 0, chunk, frag), out->round) ? (int)PBOX_F_REST
									       : -1;
}

/* Our SS_GPU completed a round (the sum to every rank), or an async store
 * let ranks go on (its parameters to those ss_out_to() names, each with
 * its own round): ours by memcpy. */
static void fan_out(struct pbox *px, struct eng *e, const struct ss_job *seg, uint32_t chunk,
		    uint16_t frag, const struct ss_out *out)
{
	uint32_t g = px->net.unit[px->net.self_unit].global[chunk] * px->net.fpc + frag;
	uint64_t digest = nic_mac_digest(&px->net.mac, out->buf, out->len);
	uint64_t empty = out->mode == SS_REDUCE || out->mode == SS_BCAST
				 ? nic_mac_digest(&px->net.mac, out->buf, 0)
				 : digest;
	struct pbox_hdr h;
	int rest = empty_flags(seg, chunk, frag, out);

	for (uint32_t r = 0; r < px->net.n; r++) {
		uint16_t len = ss_out_len(out, r);
		int flags = len ? 0 : rest;

		if (r == px->net.rank || !ss_out_to(out, r) || flags < 0)
			continue;
		result_hdr(px, &h, r, chunk, frag, out, len ? digest : empty, (uint8_t)flags);
		/* a broadcast's fan-out was booked on our link when its root, this
		 * rank, pushed (wk_serve_own()) */
		wk_tx_send(px, e, ss_peer(seg, 0, r)->ip_be, ss_peer(seg, 0, r)->port, &h, out->buf,
			   len, true, out->mode == SS_BCAST);
		px->net.es.st.ssgpu_results += len;
	}
	/* ours last: it may complete a sum, and frag_done() sends the batch,
	 * the peers' results in it, before it says so */
	if (ss_out_to(out, px->net.rank))
		wk_deliver(px, g, out->buf, ss_out_len(out, px->net.rank),
			   (uint8_t)(out->dtype >> PBOX_COMP_SHIFT),
			   ss_out_round(out, px->net.rank));
	/* An async store's batch refers to its buffer, signed as it is now: out
	 * before the next push of the fragment (in this same receive burst,
	 * with no round barrier to stop it) can add a delta into it. */
	if (out->mode == SS_ASYNC)
		wk_tx_flush(px, e);
}

static void overdue_fail(struct pbox *px, uint32_t g, uint64_t now)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	uint32_t c = g / px->net.fpc;
	const struct ss_job *seg = ss_job_seg(px->net.es.ssj, 0, px->net.chunk_local[c]);
	uint32_t idx = ss_frag_of(seg, 0, px->net.chunk_local[c], (uint16_t)(g % px->net.fpc));
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

/* A peer's push on its way through our SS_GPU (wk_serve_push()). */
struct serve_ctx {
	struct pbox *px;
	struct eng *e;
	const struct ss_job *seg;
	struct nic_addr src;
};

/* What our SS_GPU makes of a peer's push, one fragment's verdict @v (ss_push_each()). */
static void serve_verdict(void *arg, const struct pbox_hdr *h, enum ss_verdict v,
			  struct ss_out *out)
{
	struct serve_ctx *sc = arg;
	struct pbox *px = sc->px;

	px->net.es.st.ssgpu_needless += out->needless;
	switch (v) {
	case SS_SUMMED:
		px->net.es.st.ssgpu_summed += h->len;
		break;
	case SS_COMPLETE:
	case SS_RELEASE:
		px->net.es.st.ssgpu_summed += h->len;
		fan_out(px, sc->e, sc->seg, h->chunk, h->frag, out);
		break;
	case SS_ANSWER: {
		struct pbox_hdr r;

		result_hdr(px, &r, h->rank, h->chunk, h->frag, out,
			   nic_mac_digest(&px->net.mac, out->buf, ss_out_len(out, h->rank)), 0);
		wk_tx_add(px, sc->e, sc->src.ip_be, sc->src.port, &r, out->buf, r.len, true);
		px->net.es.st.ssgpu_results += r.len;
		if (out->mode == SS_ASYNC) /* see fan_out() */
			wk_tx_flush(px, sc->e);
		break;
	}
	case SS_WAITING:
	case SS_NACK:
	case SS_DONE:
		px->net.es.st.nacks_sent += v == SS_NACK;
		wk_tx_reply(px, sc->e, &sc->src, h,
			    v == SS_WAITING ? PBOX_OP_ACK
			    : v == SS_NACK  ? PBOX_OP_NACK
					    : PBOX_OP_DONE,
			    0);
		break;
	case SS_DROP: {
		uint16_t err;
		uint8_t op = ss_reply_of(out->why, &err);

		if (op)
			wk_tx_reply(px, sc->e, &sc->src, h, op, err);
		break;
	}
	}
}

/*
 * Pushes for chunks not laid out here yet. Rank 0 lays a growth out and
 * pushes at once, and its pushes can come before its GREW has crossed the
 * TCP connection and this engine's control turn has read it: dropped,
 * each would wait for its sender's retransmission timeout, 50 ms at
 * least, and every new tensor's first round with it. Held instead, signed
 * by the job's key, up to WK_EARLY_MAX of them and WK_EARLY_BYTES of
 * payload (past that they are dropped, and resent as before), and summed
 * once laid out.
 */
#define WK_EARLY_MAX   4096u
#define WK_EARLY_BYTES (4ull << 20)

static void early_hold(struct pbox *px, const struct pbox_hdr *h, const uint8_t *p,
		       const struct sockaddr_in *from)
{
	struct wk_early *x;

	if (h->op != PBOX_OP_PUSH || px->net.es.n_early >= WK_EARLY_MAX ||
	    px->net.es.early_bytes + h->len > WK_EARLY_BYTES || !nic_mac_ok(&px->net.mac, h, p))
		return;
	if (px->net.es.n_early == px->net.es.cap_early) {
		uint32_t cap = px->net.es.cap_early ? 2 * px->net.es.cap_early : 64;

		x = realloc(px->net.es.early, cap * sizeof(*x));
		if (!x)
			return;
		px->net.es.early = x;
		px->net.es.cap_early = cap;
	}
	x = &px->net.es.early[px->net.es.n_early];
	x->p = malloc(h->len ? h->len : 1);
	if (!x->p)
		return;
	memcpy(x->p, p, h->len);
	x->h = *h;
	x->from = *from;
	px->net.es.n_early++;
	px->net.es.early_bytes += h->len;
}

int wk_serve_early(struct pbox *px, struct eng *e)
{
	uint32_t laid = px->net.unit[px->net.self_unit].n_chunks, kept = 0, n = px->net.es.n_early;

	for (uint32_t i = 0; i < n; i++) {
		struct wk_early x = px->net.es.early[i];

		if (x.h.chunk >= laid) {
			px->net.es.early[kept++] = x;
			continue;
		}
		wk_serve_push(px, e, &x.h, x.p, &x.from);
		px->net.es.early_bytes -= x.h.len;
		free(x.p);
	}
	px->net.es.n_early = kept;
	if (kept < n)
		wk_tx_flush(px, e);
	return (int)(n - kept);
}

void wk_serve_early_free(struct pbox *px)
{
	for (uint32_t i = 0; i < px->net.es.n_early; i++)
		free(px->net.es.early[i].p);
	free(px->net.es.early);
	px->net.es.early = NULL;
	px->net.es.n_early = px->net.es.cap_early = 0;
	px->net.es.early_bytes = 0;
}

void wk_serve_push(struct pbox *px, struct eng *e, const struct pbox_hdr *h, const uint8_t *p,
		   const struct sockaddr_in *from)
{
	struct ss_job *seg = ss_job_seg(px->net.es.ssj, 0, h->chunk);
	struct serve_ctx sc = {
		.px = px,
		.e = e,
		.src = {.ip_be = from->sin_addr.s_addr, .port = ntohs(from->sin_port)}};

	/* a chunk past what we have laid out: a tensor the others have agreed
	 * on, before we read rank 0's GREW (held until we have) */
	if (!seg && h->chunk >= px->net.unit[px->net.self_unit].n_chunks) {
		early_hold(px, h, p, from);
		return;
	}
	if (!seg)
		seg = px->net.es.ssj;
	if (!seg)
		return;
	sc.seg = seg;
	/* a push, or a rooted chunk's turns in one (PBOX_F_REST) */
	ss_push_each(seg, 0, h, p, &sc.src, serve_verdict, &sc);
}

/*
 * Our own push of fragment @g (header @h, signed) into our own SS_GPU,
 * from our own address: no network. Summed, it waits in the local FIFO for
 * the other ranks' pushes (wk_serve_overdue() names the silent ones);
 * completing the round, it fans the sum out.
 */
void wk_serve_own(struct pbox *px, struct eng *e, uint32_t g, const struct pbox_hdr *h,
		  const uint8_t *payload)
{
	const struct wk_frag *f = &px->net.es.frag[g];
	const struct wk_tensor *t = f->op->t;
	const struct nic_addr self = {.ip_be = px->net.unit[px->net.self_unit].ip_be,
				      .port = px->net.unit[px->net.self_unit].port};
	struct ss_job *seg = ss_job_seg(px->net.es.ssj, 0, h->chunk);
	struct ss_out out = {.why = SS_DROP_CHUNK};

	px->net.es.st.ssgpu_summed += f->len;
	/* Our own push as a broadcast's root (an all-gather's shard): its
	 * fan-out to the n - 1 others, booked on our link now, whenever the
	 * others' turns complete the round. The root's pushes then go at the
	 * pace its fan-out can leave; booked only as it leaves, a credit's
	 * worth of them would wait for late turns and then leave at once,
	 * n - 1 copies of it queued on our link. */
	if (wk_root_sends(t))
		wk_pace_book(px, px->net.n - 1, f->len);
	switch (seg ? ss_push(seg, 0, h, payload, &self, &out) : SS_DROP) {
	case SS_SUMMED:
		if (wk_ring_push(&px->net.es.local, g, f->stamp))
			wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0,
				 "out of memory for the send FIFOs");
		break;
	case SS_COMPLETE:
	case SS_RELEASE:
		fan_out(px, e, seg, h->chunk, h->frag, &out);
		break;
	case SS_ANSWER: /* an async store's answer to us alone */
		wk_deliver(px, g, out.buf, out.len, (uint8_t)(out.dtype >> PBOX_COMP_SHIFT),
			   out.round);
		break;
	case SS_WAITING: /* an async store holds our answer: another rank's push releases it */
		break;
	default:
		wk_raise(px, WK_FK_LOCAL, PBOX_EINVAL, 0,
			 "tensor key %" PRIu64 ": our own SS_GPU refused our push: %s", t->key,
			 ss_drop_name(out.why));
		break;
	}
}

/* The oldest of our fragments summed in our own SS_GPU still waiting for
 * the other ranks' pushes past the deadline: the job fails naming them. */
void wk_serve_overdue(struct pbox *px, uint64_t now)
{
	uint32_t g;
	const struct wk_frag *f;

	if (!px->net.es.ssj)
		return;
	f = wk_ring_head(px, &px->net.es.local, &g);
	if (f && now - f->first >= px->net.es.deadline_ns)
		overdue_fail(px, g, now);
}
