/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP transport (transport.h's table, the default; dpdk.c is the
 * other): the engine's sends gathered into one sendmmsg() batch, GSO where
 * the kernel takes it, and receive batches with recvmmsg() and GRO. Its
 * batch state (struct eng) is the engine's to pass around and nobody
 * else's to look into.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wk_ctx.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_udp.h"

/*
 * UDP GSO: consecutive datagrams to one destination leave in one send, the
 * kernel (or the NIC) cutting it at the first datagram's size; only the
 * last may be shorter. UDP's 64 KiB bound comes first: 7 fragments of 8 KiB.
 */
#define WK_GSO_MAX   16
#define WK_GSO_BYTES 65507u /* IPv4's largest UDP payload */
#define WK_RX_GRO    65536u /* a receive buffer when GRO may coalesce */
#define WK_GSO_SCAN  16	    /* entries looked back for a datagram's peer */

struct eng {
	/* transmit batch: entries of one or more datagrams (GSO), each
	 * datagram two iovecs (header, payload) */
	struct mmsghdr tmm[WK_BATCH];
	struct iovec tiov[WK_BATCH][2 * WK_GSO_MAX];
	struct sockaddr_in to[WK_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} tcm[WK_BATCH];
	uint16_t seg[WK_BATCH]; /* the entry's first datagram size */
	uint8_t nseg[WK_BATCH];
	bool open[WK_BATCH]; /* its last datagram is full size: more may follow */
	uint8_t thdr[WK_BATCH * WK_GSO_MAX][PBOX_HDR_LEN + 2];
	unsigned tn, nh; /* entries, header slots used */
	bool gso;
	/* receive batch */
	struct mmsghdr rmm[WK_BATCH];
	struct iovec riov[WK_BATCH];
	struct sockaddr_in from[WK_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} rcm[WK_BATCH];
	uint8_t *rbuf;
	size_t rsize;
};

struct eng *wk_udp_batch_new(const struct pbox *px)
{
	struct eng *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->gso = px->cfg.transport.gso && px->net.tp->gso;
	e->rsize = px->net.gro ? WK_RX_GRO : PBOX_HDR_LEN + px->net.frag_size + 64;
	e->rbuf = malloc(e->rsize * WK_BATCH);
	if (!e->rbuf) {
		free(e);
		return NULL;
	}
	return e;
}

void wk_udp_batch_free(struct eng *e)
{
	if (e)
		free(e->rbuf);
	free(e);
}

/* Whether @err is one peer not there (yet): the datagram is lost, and
 * recovered later like any other. */
static bool peer_absent(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH;
}

/* Whether a send failed with @err only for want of room now: then it has
 * waited (up to a millisecond) for the socket to drain, and may try again. */
static bool tx_wait_room(const struct pbox *px, int err)
{
	struct pollfd p = {.fd = px->net.udp, .events = POLLOUT};

	if (err != EINTR && err != EAGAIN && err != ENOBUFS)
		return false;
	poll(&p, 1, 1);
	return true;
}

/* The kernel refused GSO (a device without checksum offload, an old
 * kernel): entry @i goes as single datagrams, and GSO stays off. */
static int tx_split(struct pbox *px, struct eng *e, unsigned i)
{
	if (e->gso)
		wk_log(px, CFG_LOG_INFO, "UDP GSO refused (%s): sending datagrams one by one",
		       strerror(errno));
	e->gso = false;
	for (unsigned d = 0; d < e->nseg[i]; d++) {
		struct msghdr m = {.msg_name = &e->to[i],
				   .msg_namelen = sizeof(e->to[i]),
				   .msg_iov = &e->tiov[i][2 * d],
				   .msg_iovlen = 2};

		while (sendmsg(px->net.udp, &m, 0) < 0 && !peer_absent(errno))
			if (!tx_wait_room(px, errno))
				return -1;
	}
	return 0;
}

/* UDP: what tx queued, in one sendmmsg (GSO runs as one message each). */
static void udp_flush(void *st, void *eng)
{
	struct pbox *px = st;
	struct eng *e = eng;
	unsigned s = 0;

	for (unsigned i = 0; i < e->tn; i++) {
		struct msghdr *m = &e->tmm[i].msg_hdr;

		m->msg_iovlen = 2 * (size_t)e->nseg[i];
		m->msg_control = NULL;
		m->msg_controllen = 0;
		if (e->nseg[i] > 1) {
			struct cmsghdr *c;

			m->msg_control = e->tcm[i].buf;
			m->msg_controllen = sizeof(e->tcm[i].buf);
			c = CMSG_FIRSTHDR(m);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			memcpy(CMSG_DATA(c), &e->seg[i], sizeof(uint16_t));
			px->net.es.st.tx_gso += e->nseg[i];
		}
	}
	while (s < e->tn) {
		int w = sendmmsg(px->net.udp, e->tmm + s, e->tn - s, 0);

		if (w < 0) {
			if (tx_wait_room(px, errno))
				continue;
			if (peer_absent(errno)) {
				s++;
				continue;
			}
			if (e->nseg[s] > 1 && (errno == EIO || errno == EINVAL) &&
			    tx_split(px, e, s) == 0) {
				px->net.es.st.tx_gso -= e->nseg[s];
				s++;
				continue;
			}
			wk_raise(px, WK_FK_LOCAL, PBOX_ENET, 0, "sending on UDP port %u: %s",
				 px->cfg.data.port, strerror(errno));
			break;
		}
		s += (unsigned)w;
	}
	e->tn = e->nh = 0;
}

/* The newest entry of the batch to @ip_be:@port among its last
 * WK_GSO_SCAN, or -1. The engine's sends interleave destinations (each
 * partition's chunks go to their owners in turn, a sum fans out to every
 * rank), so the datagrams for one peer seldom come one after another. */
static int udp_last_to(const struct eng *e, uint32_t ip_be, uint16_t port)
{
	unsigned lo = e->tn > WK_GSO_SCAN ? e->tn - WK_GSO_SCAN : 0;

	for (unsigned i = e->tn; i-- > lo;)
		if (e->to[i].sin_addr.s_addr == ip_be && e->to[i].sin_port == htons(port))
			return (int)i;
	return -1;
}

/*
 * UDP: queue one datagram: header @h, then @len bytes at @payload; joined
 * to the batch's newest entry for the same peer when GSO can carry both and
 * @gso allows it: to peers' sockets only. A box port may be a virtual device
 * that takes a GSO frame whole (af_packet on a veth) where a NIC would have
 * cut it. Datagrams to one peer leave in the order queued (never joined to
 * an older entry than its newest); to different peers in any order.
 */
static void udp_tx(void *st, void *eng, uint32_t ip_be, uint16_t port, const struct pbox_hdr *h,
		   const void *payload, uint16_t len, bool gso)
{
	struct pbox *px = st;
	struct eng *e = eng;
	uint16_t dlen = (uint16_t)(PBOX_HDR_LEN + len);
	int last = gso && e->gso ? udp_last_to(e, ip_be, port) : -1;
	unsigned i = last < 0 ? 0 : (unsigned)last, d;

	if (!(last >= 0 && e->open[i] && dlen <= e->seg[i] && e->nseg[i] < WK_GSO_MAX &&
	      (e->nseg[i] + 1u) * e->seg[i] <= WK_GSO_BYTES)) {
		if (e->tn == WK_BATCH)
			udp_flush(px, e);
		i = e->tn++;
		e->to[i] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(port)};
		e->to[i].sin_addr.s_addr = ip_be;
		e->tmm[i].msg_hdr = (struct msghdr){.msg_name = &e->to[i],
						    .msg_namelen = sizeof(e->to[i]),
						    .msg_iov = e->tiov[i]};
		e->seg[i] = dlen;
		e->nseg[i] = 0;
	}
	d = e->nseg[i]++;
	e->open[i] = gso && dlen == e->seg[i];
	nic_wire_put_hdr(e->thdr[e->nh], h);
	e->tiov[i][2 * d] = (struct iovec){e->thdr[e->nh++], PBOX_HDR_LEN};
	e->tiov[i][2 * d + 1] = (struct iovec){(void *)(uintptr_t)payload, len};
}

/* The size GRO cut a coalesced message at, or 0. */
static size_t gro_size(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			int v;

			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v > 0 ? (size_t)v : 0;
		}
	return 0;
}

/* UDP: a batch of datagrams (GRO-coalesced runs cut apart) to @fn. */
static int udp_rx(void *st, wk_dgram_fn *fn, void *eng, uint64_t now)
{
	struct pbox *px = st;
	struct eng *e = eng;
	int n, i;

	for (i = 0; i < WK_BATCH; i++) {
		e->riov[i] = (struct iovec){e->rbuf + (size_t)i * e->rsize, e->rsize};
		e->rmm[i].msg_hdr =
			(struct msghdr){.msg_name = &e->from[i],
					.msg_namelen = sizeof(e->from[i]),
					.msg_iov = &e->riov[i],
					.msg_iovlen = 1,
					.msg_control = px->net.gro ? e->rcm[i].buf : NULL,
					.msg_controllen = px->net.gro ? sizeof(e->rcm[i].buf) : 0};
	}
	n = recvmmsg(px->net.udp, e->rmm, WK_BATCH, MSG_DONTWAIT, NULL);
	if (n <= 0)
		return 0;
	for (i = 0; i < n; i++) {
		const uint8_t *b = e->riov[i].iov_base;
		size_t len = e->rmm[i].msg_len,
		       seg = px->net.gro ? gro_size(&e->rmm[i].msg_hdr) : 0;

		if (e->rmm[i].msg_hdr.msg_flags & MSG_TRUNC) {
			px->net.es.st.rx_pkts++;
			continue;
		}
		if (!seg || seg >= len) {
			fn(px, e, b, len, &e->from[i], now);
			continue;
		}
		/* coalesced by GRO: datagrams of @seg bytes, the last maybe shorter */
		for (size_t off = 0; off < len; off += seg) {
			px->net.es.st.rx_gro++;
			fn(px, e, b + off, len - off < seg ? len - off : seg, &e->from[i], now);
		}
	}
	return n;
}

static void udp_describe(const void *st, char *buf, size_t cap)
{
	const struct pbox *px = st;

	snprintf(buf, cap, "udp%s",
		 px->cfg.transport.gso ? (px->net.gro ? ", GSO and GRO" : ", GSO") : "");
}

const struct wk_transport wk_udp_transport = {
	.tx = udp_tx,
	.flush = udp_flush,
	.rx = udp_rx,
	.describe = udp_describe,
	.gso = true,
};

/* Room for a reply's payload of up to 2 bytes that lasts until the batch
 * is flushed: the tail of the next datagram's header slot (the batch
 * flushed first when it is full, so the send that takes it cannot flush). */
uint8_t *wk_udp_slot(struct pbox *px, struct eng *e)
{
	if (e->tn == WK_BATCH)
		px->net.tp->flush(px->net.tp_st, e);
	return e->thdr[e->nh] + PBOX_HDR_LEN;
}
