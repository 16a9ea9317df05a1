/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data path of pboxd: one loop per data core, over that core's
 * endpoints only. Per burst: receive, validate every frame (nic_wire_parse,
 * then ss_push's job checks), sum in place, and on completion send the one
 * result payload to all n workers as n header mbufs chained to external
 * mbufs that point at the result buffer (no payload copy). No locks, no
 * atomics, no writes outside this core's struct box_lcore and its jobs.
 */
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <rte_branch_prediction.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_memory.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "box.h"
#include "nic_host.h"

static void ep_flush(struct box_lcore *lc, struct box_ep *ep)
{
	uint16_t sent = 0, n = ep->n_tx;
	unsigned tries = 0;

	while (sent < n && tries++ < 4)
		sent += rte_eth_tx_burst(ep->port_id, ep->queue, ep->tx + sent, n - sent);
	if (unlikely(sent < n)) {
		lc->st.tx_drops += n - sent;
		rte_pktmbuf_free_bulk(ep->tx + sent, n - sent);
	}
	lc->st.tx_pkts += sent;
	ep->n_tx = 0;
}

static inline void ep_send(struct box_lcore *lc, struct box_ep *ep, struct rte_mbuf *m)
{
	lc->st.tx_bytes += m->pkt_len;
	ep->tx[ep->n_tx++] = m;
	if (unlikely(ep->n_tx == BOX_TX_MAX))
		ep_flush(lc, ep);
}

void box_lcore_tx_reap(struct box_lcore *lc)
{
	unsigned e;

	for (e = 0; e < lc->n_eps; e++) {
		if (lc->ep[e].n_tx)
			ep_flush(lc, &lc->ep[e]);
		rte_eth_tx_done_cleanup(lc->ep[e].port_id, lc->ep[e].queue, 0);
	}
}

/* One result frame to @to: our headers in a fresh mbuf, the payload by
 * reference to the job's result buffer. @digest: nic_mac_digest() of the
 * result, once for all its receivers. */
static void send_result(struct box_lcore *lc, struct box_ep *ep, const struct ss_job *j,
			const struct pbox_hdr *push, uint16_t rank, const struct nic_addr *to,
			const struct ss_out *out, uint64_t digest)
{
	struct rte_mbuf *h = rte_pktmbuf_alloc(lc->pool), *p;
	struct pbox_hdr rh = {.op = PBOX_OP_RESULT,
			      .dtype = out->dtype, /* the job's, and the result's compressor */
			      .rank = rank,
			      .job = j->id,
			      .chunk = push->chunk,
			      .frag = push->frag,
			      .len = out->len,
			      .round = ss_out_round(out, rank)};
	struct nic_addr dst = *to;
	uint8_t *hdrs;

	rh.mac = nic_mac_hdr(&j->mac, &rh, digest);
	if (unlikely(!h)) {
		lc->st.tx_nombuf++;
		return;
	}
	if (ep->gateway)
		memcpy(dst.mac, ep->gw_mac, 6);
	if (likely(ep->multiseg)) {
		p = rte_pktmbuf_alloc(lc->pool);
		if (unlikely(!p)) {
			rte_pktmbuf_free(h);
			lc->st.tx_nombuf++;
			return;
		}
		hdrs = (uint8_t *)rte_pktmbuf_append(h, NIC_HDRS_LEN);
		rte_mbuf_ext_refcnt_update(&((struct box_txref *)out->txref)->sh, 1);
		rte_pktmbuf_attach_extbuf(p, (void *)(uintptr_t)out->buf,
					  ((struct box_txref *)out->txref)->iova, out->len,
					  &((struct box_txref *)out->txref)->sh);
		p->data_len = out->len;
		p->pkt_len = out->len;
		h->next = p;
		h->nb_segs = 2;
		h->pkt_len = NIC_HDRS_LEN + out->len;
	} else {
		/* The port cannot chain: one copy per destination, counted. */
		hdrs = (uint8_t *)rte_pktmbuf_append(h, (uint16_t)(NIC_HDRS_LEN + out->len));
		if (unlikely(!hdrs)) {
			rte_pktmbuf_free(h);
			lc->st.tx_nombuf++;
			return;
		}
		memcpy(hdrs + NIC_HDRS_LEN, out->buf, out->len);
		lc->st.tx_payload_copies++;
	}
	nic_wire_write_headers(hdrs, &ep->self, &dst, &rh);
	ep_send(lc, ep, h);
}

/*
 * Turn the received push or probe into a reply to its sender, in the same
 * mbuf: an error (PBOX_OP_ERROR, @err as its payload), an ACK (a duplicate
 * or a probe of an incomplete round: the sender's part is in) or a NACK (a
 * probe: the sender's part is not in).
 * Signed with the job's key; @mac NULL (no such job): MAC 0.
 */
static void reply_in_place(struct box_lcore *lc, struct box_ep *ep, struct rte_mbuf *m,
			   const struct nic_pkt *pkt, const struct nic_mac *mac, uint8_t op,
			   uint16_t err)
{
	struct pbox_hdr rh = pkt->hdr;
	struct nic_addr to = {.ip_be = pkt->src_ip_be, .port = pkt->src_port};
	uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);

	memcpy(to.mac, ep->gateway ? ep->gw_mac : pkt->src_mac, 6);
	rh.op = op;
	rh.flags = 0;
	rh.len = op == PBOX_OP_ERROR ? 2 : 0;
	if (op == PBOX_OP_ERROR)
		nic_put16(f + NIC_HDRS_LEN, err);
	rh.mac = mac ? nic_mac_of(mac, &rh, f + NIC_HDRS_LEN) : 0;
	nic_wire_write_headers(f, &ep->self, &to, &rh);
	rte_pktmbuf_data_len(m) = (uint16_t)(NIC_HDRS_LEN + rh.len);
	rte_pktmbuf_pkt_len(m) = NIC_HDRS_LEN + rh.len;
	ep_send(lc, ep, m);
}

/* One pbox push or probe. Returns true when @m was consumed (sent back). */
static bool handle_push(struct box_lcore *lc, struct box_ep *ep, unsigned slot, struct rte_mbuf *m,
			const struct nic_pkt *pkt)
{
	struct ss_job *j = ss_table_find(&lc->jobs, pkt->hdr.job);
	struct nic_addr from = {.ip_be = pkt->src_ip_be, .port = pkt->src_port};
	enum ss_verdict v;
	struct ss_out out;
	uint64_t digest;
	uint16_t r, err;
	uint8_t op;

	if (unlikely(!j)) {
		out.why = SS_DROP_NO_JOB;
		goto dropped;
	}
	if (unlikely(j->next)) { /* it grew: the segment of this chunk */
		struct ss_job *seg = ss_job_seg(j, slot, pkt->hdr.chunk);

		if (seg)
			j = seg; /* else the first refuses it, as out of range */
	}
	memcpy(from.mac, pkt->src_mac, 6);
	lc->st.probes += pkt->hdr.op == PBOX_OP_PROBE;
	v = ss_push(j, slot, &pkt->hdr, rte_pktmbuf_mtod_offset(m, void *, pkt->payload_off), &from,
		    &out);
	lc->st.needless += out.needless;
	switch (v) {
	case SS_SUMMED:
		lc->st.summed++;
		return false;
	case SS_COMPLETE:
		lc->st.completed++;
		/* fall through */
	case SS_RELEASE: /* every rank; an async store's release: those it names */
		lc->st.summed++;
		digest = nic_mac_digest(&j->mac, out.buf, out.len);
		for (r = 0; r < j->n; r++)
			if (ss_out_to(&out, r)) {
				send_result(lc, ep, j, &pkt->hdr, r, ss_peer(j, slot, r), &out,
					    digest);
				lc->st.results++;
				j->cnt.results++;
			}
		return false;
	case SS_ANSWER: /* to the rank as its pushes taught us, not to whoever
			 * sent this copy: results stay with their rank */
		send_result(lc, ep, j, &pkt->hdr, pkt->hdr.rank, ss_peer(j, slot, pkt->hdr.rank),
			    &out, nic_mac_digest(&j->mac, out.buf, out.len));
		lc->st.answers++;
		return false;
	case SS_WAITING: /* a probe: the prober's part is in */
		lc->st.acks_sent++;
		reply_in_place(lc, ep, m, pkt, &j->mac, PBOX_OP_ACK, 0);
		return true;
	case SS_NACK: /* a probe: the prober's push was lost */
		lc->st.nacks_sent++;
		reply_in_place(lc, ep, m, pkt, &j->mac, PBOX_OP_NACK, 0);
		return true;
	case SS_DONE: /* a probe: the result went out before this reply */
		lc->st.dones_sent++;
		reply_in_place(lc, ep, m, pkt, &j->mac, PBOX_OP_DONE, 0);
		return true;
	case SS_DROP:
		goto dropped;
	}
	return false;
dropped:
	lc->st.ss_drop[out.why]++;
	op = ss_reply_of(out.why, &err);
	if (!op)
		return false;
	if (op == PBOX_OP_ACK)
		lc->st.acks_sent++;
	else
		lc->st.errors_sent++;
	reply_in_place(lc, ep, m, pkt, j ? &j->mac : NULL, op, err);
	return true;
}

static void handle_burst(struct box_lcore *lc, unsigned slot, struct rte_mbuf **pkts, uint16_t n)
{
	struct box_ep *ep = &lc->ep[slot];
	struct rte_mbuf *done[BOX_BURST];
	unsigned n_done = 0;
	struct nic_pkt pkt;
	uint16_t i;

	lc->st.rx_pkts += n;
	for (i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);
		uint16_t len = rte_pktmbuf_data_len(m);
		enum nic_drop d;
		size_t rlen;

		if (i + 1 < n)
			rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], void *));
		lc->st.rx_bytes += m->pkt_len;
		if (unlikely(m->nb_segs != 1)) {
			lc->st.multiseg++;
			done[n_done++] = m;
			continue;
		}
		d = nic_wire_parse(f, len, &ep->exp, &pkt);
		if (unlikely(d != NIC_DROP_NONE)) {
			lc->st.nic_drop[d]++;
			done[n_done++] = m;
			continue;
		}
		if (likely(pkt.kind == NIC_KIND_PBOX)) {
			if (!handle_push(lc, ep, slot, m, &pkt))
				done[n_done++] = m;
			continue;
		}
		rlen = pkt.kind == NIC_KIND_ARP
			       ? nic_host_arp_reply(f, len, ep->self.mac, ep->self.ip_be)
			       : nic_host_icmp_reply(f, len, &pkt, ep->self.mac);
		if (!rlen) {
			lc->st.foreign++;
			done[n_done++] = m;
			continue;
		}
		if (pkt.kind == NIC_KIND_ARP)
			lc->st.arp_replies++;
		else
			lc->st.icmp_replies++;
		rte_pktmbuf_data_len(m) = (uint16_t)rlen;
		rte_pktmbuf_pkt_len(m) = (uint32_t)rlen;
		ep_send(lc, ep, m);
	}
	if (n_done)
		rte_pktmbuf_free_bulk(done, n_done);
}

/* Control requests: install a job or a segment of one, or remove a job; the control plane owns the
 * memory and frees a removed job once its buffers are off the wire. */
static void ctl_poll(struct box_lcore *lc)
{
	struct box_msg *msg;

	while (rte_ring_dequeue(lc->req, (void **)&msg) == 0) {
		lc->st.ctl_msgs++;
		if (msg->type == BOX_MSG_ADD) {
			msg->rc = ss_table_add(&lc->jobs, msg->job);
		} else if (msg->type == BOX_MSG_GROW) {
			msg->rc = ss_table_grow(&lc->jobs, msg->job);
		} else {
			msg->job = ss_table_del(&lc->jobs, msg->job_id);
			msg->rc = msg->job ? 0 : -ENOENT;
			box_lcore_tx_reap(lc);
		}
		/* The reply ring has room for every request in flight. */
		rte_ring_enqueue(lc->resp, msg);
	}
}

static void nap(uint32_t us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};

	nanosleep(&ts, NULL);
}

unsigned box_lcore_poll(struct box_lcore *lc)
{
	struct rte_mbuf *pkts[BOX_BURST];
	unsigned e, got = 0;

	for (e = 0; e < lc->n_eps; e++) {
		struct box_ep *ep = &lc->ep[e];
		uint16_t n = rte_eth_rx_burst(ep->port_id, ep->queue, pkts, BOX_BURST);

		if (n == 0)
			continue;
		got += n;
		handle_burst(lc, e, pkts, n);
	}
	for (e = 0; e < lc->n_eps; e++)
		if (lc->ep[e].n_tx)
			ep_flush(lc, &lc->ep[e]);
	return got;
}

/* The SS's clock: read only when it paces an answer to one rank. */
static uint64_t tsc_us(void)
{
	return rte_rdtsc() / (rte_get_tsc_hz() / 1000000);
}

/*
 * Adaptive polling: after idle_polls empty polls a core naps between polls,
 * first idle_sleep_first and then twice as long at each nap up to
 * idle_sleep. A worker's next datagram most often comes soon after the
 * box's last answer (a small collective called back to back: its round
 * trip and the worker's own time), and a long nap at once would add up to
 * its whole length to that call; a core idle for longer naps long and
 * wakes seldom. The thread's timer slack is cut to a quarter of the first
 * nap: Linux lets a normal thread's nap run 50us over.
 */
int box_lcore_main(void *arg)
{
	struct box *b = arg;
	struct box_lcore *lc = b->lc[rte_lcore_id()];
	uint32_t idle = 0, loops = 0, sleep_us;

	if (!lc || !lc->n_eps)
		return 0;	    /* nothing to poll here */
	lc->jobs.clock_us = tsc_us; /* before ctl_poll() adds the first job */
	sleep_us = lc->idle_sleep_first_us;
	if (lc->adaptive && sleep_us < lc->idle_sleep_us)
		prctl(PR_SET_TIMERSLACK, 250ul * sleep_us + 1, 0, 0, 0); /* ns: a quarter */
	while (!b->stop) {
		uint64_t t0 = rte_rdtsc();
		unsigned got = box_lcore_poll(lc);

		if (unlikely(++loops % BOX_CTL_EVERY == 0))
			ctl_poll(lc);
		if (got) {
			lc->st.busy_cycles += rte_rdtsc() - t0;
			idle = 0;
			sleep_us = lc->idle_sleep_first_us;
		} else if (lc->adaptive && ++idle >= lc->idle_polls) {
			ctl_poll(lc);
			lc->st.idle_sleeps++;
			nap(sleep_us);
			sleep_us =
				sleep_us < lc->idle_sleep_us / 2 ? 2 * sleep_us : lc->idle_sleep_us;
		}
	}
	ctl_poll(lc);
	return 0;
}
