/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The box's per-packet path (appliance/box_lcore.c) on a ring-backed DPDK
 * port, without root: EAL with --no-huge, a net_ring port made from two
 * rte_rings, one data core's struct box_lcore and a job installed as the
 * control plane installs it. Frames go in on the rx ring, box_lcore_poll()
 * runs one pass of the core's loop, and what it sent is read back off the
 * tx ring: results to every rank by reference (no payload copy), the answer
 * to a retransmission, an ACK for a duplicate, an error naming the fault,
 * ARP, and bad frames dropped and counted. Every mbuf is back in its pool
 * afterwards and no result buffer is left referenced.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_eth_ring.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "box.h"
#include "nic_host.h"
#include "test.h"

#define T_FRAG	1024u
#define T_CHUNK 4096u
#define T_N	3u
#define T_JOB	7u
#define T_TOKEN 99u

static struct {
	struct rte_ring *rx, *tx;
	struct rte_mempool *pool;
	struct box_lcore *lc;
	struct ss_job *job;
	unsigned pool_avail;
} t;

/* The job's key and MAC mode: what the test's ranks sign with, and what
 * every frame the box sends must verify with. */
static struct nic_mac t_mac;

static struct nic_mac mac_of(uint32_t token)
{
	uint8_t key[NIC_KEY_LEN];
	struct nic_mac m;

	nic_job_key(token, T_JOB, 0, key);
	nic_mac_init(&m, NIC_MAC_PAYLOAD, key);
	return m;
}

static const struct nic_addr box_addr = {
	.mac = {0x02, 0xb0, 0, 0, 0, 1}, .ip_be = 0x010112c6u /* 198.18.1.1 */, .port = 9600};

static struct nic_addr rank_addr(unsigned r)
{
	struct nic_addr a = {.mac = {0x02, 0x77, 0, 0, 0, (uint8_t)r}, .port = 9700};

	a.ip_be = htonl(0xc6126401u + r); /* 198.18.100.(r+1) */
	return a;
}

static void setup(void)
{
	char *argv[] = {"unit_tests",	 "--no-huge",	   "-m", "64", "--no-pci",
			"--no-shconf",	 "--no-telemetry", "-l", "0",  "--log-level=*:error",
			"--iova-mode=va"};
	struct rte_eth_conf conf;
	struct ss_job_desc d = {.id = T_JOB,
				.mac = t_mac = mac_of(T_TOKEN),
				.n = T_N,
				.dtype = SUM_FP32,
				.frag_size = T_FRAG,
				.chunk_size = T_CHUNK,
				.n_eps = 1,
				.ep_chunks = {2}};
	struct box_ep *ep;
	void *mem;
	uint32_t f;
	int port;

	ck_assert_int_ge(rte_eal_init(sizeof(argv) / sizeof(argv[0]), argv), 0);
	t.rx = rte_ring_create("box_rx", 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
	t.tx = rte_ring_create("box_tx", 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
	t.pool = rte_pktmbuf_pool_create("box_pool", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
					 SOCKET_ID_ANY);
	ck_assert(t.rx && t.tx && t.pool);
	port = rte_eth_from_rings("box0", &t.rx, 1, &t.tx, 1, SOCKET_ID_ANY);
	ck_assert_int_ge(port, 0);
	memset(&conf, 0, sizeof(conf));
	ck_assert_int_eq(rte_eth_dev_configure((uint16_t)port, 1, 1, &conf), 0);
	ck_assert_int_eq(
		rte_eth_rx_queue_setup((uint16_t)port, 0, 512, SOCKET_ID_ANY, NULL, t.pool), 0);
	ck_assert_int_eq(rte_eth_tx_queue_setup((uint16_t)port, 0, 512, SOCKET_ID_ANY, NULL), 0);
	ck_assert_int_eq(rte_eth_dev_start((uint16_t)port), 0);

	t.lc = rte_zmalloc("lcore", sizeof(*t.lc), RTE_CACHE_LINE_SIZE);
	ck_assert_ptr_nonnull(t.lc);
	t.lc->n_eps = 1;
	t.lc->pool = t.pool;
	t.lc->active = true;
	ep = &t.lc->ep[0];
	ep->port_id = (uint16_t)port;
	ep->multiseg = true;
	ep->self = box_addr;
	ep->exp = (struct nic_wire_expect){.ip_be = box_addr.ip_be,
					   .port_lo = 9600,
					   .port_hi = 9600,
					   .max_payload = T_FRAG,
					   .accept_ops = PBOX_OPS_TO_SS};
	/* the job, laid out as the control plane does (reg_allocate) */
	ck_assert_ptr_null(ss_job_desc_check(&d));
	mem = rte_zmalloc("job", ss_job_bytes(&d, box_txref_size()), ss_job_align(&d));
	ck_assert_ptr_nonnull(mem);
	t.job = ss_job_init(mem, &d, box_txref_size(), sum_ops_best());
	t.job->busy = box_txref_busy;
	for (f = 0; f < t.job->n_frags; f++) {
		box_txref_init(ss_job_txref(t.job, f, 0), t.lc, ss_job_res(t.job, f, 0));
		box_txref_init(ss_job_txref(t.job, f, 1), t.lc, ss_job_res(t.job, f, 1));
	}
	ck_assert_int_eq(ss_table_add(&t.lc->jobs, t.job), 0);
	t.pool_avail = rte_mempool_avail_count(t.pool);
}

/* A frame into an mbuf on the rx ring. */
static void inject(const void *frame, size_t len)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(t.pool);
	void *p;

	ck_assert_ptr_nonnull(m);
	p = rte_pktmbuf_append(m, (uint16_t)len);
	ck_assert_ptr_nonnull(p);
	memcpy(p, frame, len);
	ck_assert_int_eq(rte_ring_enqueue(t.rx, m), 0);
}

/* @op from @rank of (chunk, frag, round) with h.len bytes of @payload,
 * signed with the key of @token (T_TOKEN: the job's), onto the port. */
static void send_signed(unsigned rank, struct pbox_hdr h, const void *payload, uint32_t token)
{
	uint8_t frame[NIC_HDRS_LEN + T_FRAG];
	const struct nic_addr from = rank_addr(rank);
	const struct nic_mac m = mac_of(token);

	h.dtype = PBOX_DTYPE_FP32;
	h.rank = (uint16_t)rank;
	h.job = T_JOB;
	h.mac = nic_mac_of(&m, &h, payload);
	ck_assert_uint_eq(nic_wire_build(frame, sizeof(frame), &from, &box_addr, &h, payload),
			  NIC_HDRS_LEN + h.len);
	inject(frame, NIC_HDRS_LEN + h.len);
}

static void push(unsigned rank, uint32_t chunk, uint16_t frag, uint32_t round, float value,
		 uint32_t token)
{
	float payload[T_FRAG / 4];

	for (unsigned i = 0; i < T_FRAG / 4; i++)
		payload[i] = value * (float)(i % 7 + 1);
	send_signed(rank,
		    (struct pbox_hdr){.op = PBOX_OP_PUSH,
				      .chunk = chunk,
				      .frag = frag,
				      .len = T_FRAG,
				      .round = round},
		    payload, token);
}

/* A probe from @rank of (chunk, frag, round); @flags: PBOX_F_PULL asks for
 * the result. */
static void probe(unsigned rank, uint32_t chunk, uint16_t frag, uint32_t round, uint8_t flags)
{
	static const uint8_t none[1];

	send_signed(rank,
		    (struct pbox_hdr){.op = PBOX_OP_PROBE,
				      .chunk = chunk,
				      .frag = frag,
				      .round = round,
				      .flags = flags},
		    none, T_TOKEN);
}

/* What the box sent: each frame linearised and parsed as its receiver would. */
struct sent {
	unsigned n;
	struct nic_pkt pkt[16];
	uint8_t frame[16][NIC_HDRS_LEN + T_FRAG];
	uint16_t segs[16];
};

static void drain(struct sent *s)
{
	struct rte_mbuf *m;

	s->n = 0;
	while (rte_ring_dequeue(t.tx, (void **)&m) == 0) {
		const void *f;
		struct nic_wire_expect any = {.accept_ops = PBOX_OPS_TO_WORKER};

		ck_assert_uint_lt(s->n, 16);
		ck_assert_uint_le(m->pkt_len, sizeof(s->frame[0]));
		f = rte_pktmbuf_read(m, 0, m->pkt_len, s->frame[s->n]);
		if (f != s->frame[s->n])
			memcpy(s->frame[s->n], f, m->pkt_len);
		s->segs[s->n] = m->nb_segs;
		s->pkt[s->n].kind = 0;
		if (nic_wire_parse(s->frame[s->n], m->pkt_len, &any, &s->pkt[s->n]) !=
		    NIC_DROP_NONE)
			s->pkt[s->n].kind = NIC_KIND_ARP;    /* checked by the ARP test itself */
		else if (s->pkt[s->n].kind == NIC_KIND_PBOX) /* signed, payload too */
			ck_assert(nic_mac_ok(&t_mac, &s->pkt[s->n].hdr,
					     s->frame[s->n] + s->pkt[s->n].payload_off));
		s->n++;
		rte_pktmbuf_free(m);
	}
}

static unsigned to_rank(const struct nic_pkt *p)
{
	unsigned r;

	for (r = 0; r < T_N; r++)
		if (p->dst_ip_be == rank_addr(r).ip_be && p->dst_port == 9700)
			return r;
	return UINT32_MAX;
}

/* The last contribution completes the round: the sum goes to each of the n
 * ranks at its own address, one payload by reference (2 segments each, no
 * copy); a retransmission after that is answered to its sender alone. */
START_TEST(round_completes_and_fans_out)
{
	struct sent s;
	unsigned r, i, seen = 0;

	for (r = 0; r < T_N; r++)
		push(r, 1, 2, 0, (float)(r + 1), T_TOKEN);
	ck_assert_uint_eq(box_lcore_poll(t.lc), T_N);
	drain(&s);
	ck_assert_uint_eq(s.n, T_N);
	for (i = 0; i < s.n; i++) {
		const struct nic_pkt *p = &s.pkt[i];
		float sum[T_FRAG / 4];

		ck_assert_uint_eq(p->kind, NIC_KIND_PBOX);
		ck_assert_uint_eq(p->hdr.op, PBOX_OP_RESULT);
		ck_assert_uint_eq(p->hdr.chunk, 1);
		ck_assert_uint_eq(p->hdr.frag, 2);
		ck_assert_uint_eq(p->hdr.round, 0);
		ck_assert_uint_eq(p->hdr.len, T_FRAG);
		memcpy(sum, s.frame[i] + p->payload_off, sizeof(sum)); /* payloads are unaligned */
		ck_assert_uint_eq(s.segs[i], 2); /* header + the payload by reference */
		r = to_rank(p);
		ck_assert_uint_eq(r, p->hdr.rank);
		ck_assert_mem_eq(p->src_mac, box_addr.mac, 6);
		seen |= 1u << r;
		for (unsigned k = 0; k < T_FRAG / 4; k++)
			ck_assert_float_eq(sum[k], 6.0f * (float)(k % 7 + 1));
	}
	ck_assert_uint_eq(seen, (1u << T_N) - 1);
	ck_assert_uint_eq(t.lc->st.completed, 1);
	ck_assert_uint_eq(t.lc->st.results, T_N);
	ck_assert_uint_eq(t.lc->st.tx_payload_copies, 0);

	push(1, 1, 2, 0, 2.0f, T_TOKEN); /* a resend of a completed round */
	box_lcore_poll(t.lc);
	drain(&s);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_uint_eq(s.pkt[0].hdr.op, PBOX_OP_RESULT);
	ck_assert_uint_eq(to_rank(&s.pkt[0]), 1);
	ck_assert_uint_eq(t.lc->st.answers, 1);
	ck_assert_uint_eq(t.lc->st.completed, 1);
}
END_TEST

/* A probe is answered to the prober alone, from the fragment's state: a
 * NACK while its push is not in (before the round starts, or while others'
 * are in), an ACK once it is, a DONE once the round completes, and the
 * result itself to a probe that pulls it. No probe touches the sum. */
START_TEST(probes_answered_from_the_state)
{
	struct sent s;
	float sum[T_FRAG / 4];

	probe(1, 0, 3, 0, 0); /* nobody has pushed round 0 */
	push(0, 0, 3, 0, 1.0f, T_TOKEN);
	probe(0, 0, 3, 0, 0); /* rank 0's part is in */
	probe(1, 0, 3, 0, 0); /* rank 1's is not */
	ck_assert_uint_eq(box_lcore_poll(t.lc), 4);
	drain(&s);
	ck_assert_uint_eq(s.n, 3);
	ck_assert_uint_eq(s.pkt[0].hdr.op, PBOX_OP_NACK);
	ck_assert_uint_eq(to_rank(&s.pkt[0]), 1);
	ck_assert_uint_eq(s.pkt[0].hdr.len, 0);
	ck_assert_uint_eq(s.pkt[1].hdr.op, PBOX_OP_ACK);
	ck_assert_uint_eq(to_rank(&s.pkt[1]), 0);
	ck_assert_uint_eq(s.pkt[2].hdr.op, PBOX_OP_NACK);
	ck_assert_uint_eq(to_rank(&s.pkt[2]), 1);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_uint_eq(s.pkt[i].hdr.chunk, 0);
		ck_assert_uint_eq(s.pkt[i].hdr.frag, 3);
		ck_assert_uint_eq(s.pkt[i].hdr.round, 0);
	}
	ck_assert_uint_eq(t.lc->st.probes, 3);
	ck_assert_uint_eq(t.lc->st.nacks_sent, 2);
	ck_assert_uint_eq(t.lc->st.acks_sent, 1);
	ck_assert_uint_eq(t.lc->st.summed, 1);

	for (unsigned r = 1; r < T_N; r++)
		push(r, 0, 3, 0, (float)(r + 1), T_TOKEN);
	box_lcore_poll(t.lc);
	drain(&s);
	ck_assert_uint_eq(s.n, T_N);
	probe(2, 0, 3, 0, 0); /* done: the result went out before this answer */
	box_lcore_poll(t.lc);
	drain(&s);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_uint_eq(s.pkt[0].hdr.op, PBOX_OP_DONE);
	ck_assert_uint_eq(to_rank(&s.pkt[0]), 2);
	ck_assert_uint_eq(t.lc->st.dones_sent, 1);
	ck_assert_uint_eq(t.lc->st.answers, 0);
	probe(2, 0, 3, 0, PBOX_F_PULL); /* rank 2 had not got it: lost */
	box_lcore_poll(t.lc);
	drain(&s);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_uint_eq(s.pkt[0].hdr.op, PBOX_OP_RESULT);
	ck_assert_uint_eq(to_rank(&s.pkt[0]), 2);
	memcpy(sum, s.frame[0] + s.pkt[0].payload_off, sizeof(sum));
	for (unsigned k = 0; k < T_FRAG / 4; k++)
		ck_assert_float_eq(sum[k], 6.0f * (float)(k % 7 + 1));
	ck_assert_uint_eq(t.lc->st.answers, 1);
	ck_assert_uint_eq(t.lc->st.needless, 0); /* a probe is no resend */
	ck_assert_uint_eq(t.lc->st.completed, 1);
}
END_TEST

/* A duplicate of a round still waiting is ACKed; a push signed with
 * another key is dropped unanswered (its sender may not hold the job's key:
 * nothing is reflected); a wrong length gets an error saying so; none
 * touches the sum. */
START_TEST(ack_and_error_replies)
{
	struct sent s;

	push(0, 0, 0, 0, 1.0f, T_TOKEN);
	push(0, 0, 0, 0, 1.0f, T_TOKEN); /* duplicate: ranks 1 and 2 missing */
	push(2, 0, 1, 0, 1.0f, T_TOKEN + 1);
	{ /* rank 1, right key, 4 bytes short of the fragment */
		uint8_t frame[NIC_HDRS_LEN + T_FRAG] = {0};
		static const uint8_t zero[T_FRAG];
		const struct nic_addr from = rank_addr(1);
		struct pbox_hdr h = {.op = PBOX_OP_PUSH,
				     .dtype = PBOX_DTYPE_FP32,
				     .rank = 1,
				     .job = T_JOB,
				     .len = T_FRAG - 4};

		h.mac = nic_mac_of(&t_mac, &h, zero);
		inject(frame, nic_wire_build(frame, sizeof(frame), &from, &box_addr, &h, zero));
	}
	ck_assert_uint_eq(box_lcore_poll(t.lc), 4);
	drain(&s);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_uint_eq(s.pkt[0].hdr.op, PBOX_OP_ACK);
	ck_assert_uint_eq(to_rank(&s.pkt[0]), 0);
	ck_assert_uint_eq(s.pkt[0].hdr.len, 0);
	ck_assert_uint_eq(s.pkt[1].hdr.op, PBOX_OP_ERROR);
	ck_assert_uint_eq(to_rank(&s.pkt[1]), 1);
	ck_assert_uint_eq(nic_be16(s.frame[1] + s.pkt[1].payload_off), PBOX_ERR_LEN);
	ck_assert_uint_eq(t.lc->st.acks_sent, 1);
	ck_assert_uint_eq(t.lc->st.errors_sent, 1);
	ck_assert_uint_eq(t.lc->st.ss_drop[SS_DROP_DUP], 1);
	ck_assert_uint_eq(t.lc->st.ss_drop[SS_DROP_MAC], 1);
	ck_assert_uint_eq(t.lc->st.ss_drop[SS_DROP_LEN], 1);
	ck_assert_uint_eq(t.lc->st.summed, 1);
	ck_assert_uint_eq(t.lc->st.completed, 0);
}
END_TEST

/* A frame with a bad IP checksum is dropped before anything else looks at
 * it, and counted; so is one from the broadcast address, unanswered; an
 * ARP request for the port's address is answered. */
START_TEST(bad_frames_counted_arp_answered)
{
	uint8_t frame[NIC_HDRS_LEN + T_FRAG], arp[64];
	const struct nic_addr from = rank_addr(0);
	static const uint8_t zero[T_FRAG];
	struct pbox_hdr h = {.op = PBOX_OP_PUSH,
			     .dtype = PBOX_DTYPE_FP32,
			     .job = T_JOB,
			     .len = T_FRAG,
			     .round = 0};
	struct sent s;
	uint32_t ip;
	uint8_t mac[6];
	size_t n;

	h.mac = nic_mac_of(&t_mac, &h, zero);
	nic_wire_build(frame, sizeof(frame), &from, &box_addr, &h, zero);
	frame[NIC_ETH_LEN + 10] ^= 0x5a; /* the IPv4 checksum */
	inject(frame, sizeof(frame));
	{ /* a push claiming the broadcast source: no error reply to everyone */
		struct nic_addr bcast = from;

		memset(bcast.mac, 0xff, 6);
		nic_wire_build(frame, sizeof(frame), &bcast, &box_addr, &h, zero);
		inject(frame, sizeof(frame));
	}
	n = nic_host_arp_request(arp, from.mac, from.ip_be, box_addr.ip_be);
	ck_assert_uint_gt(n, 0);
	inject(arp, n);
	ck_assert_uint_eq(box_lcore_poll(t.lc), 3);
	drain(&s);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_uint_eq(t.lc->st.nic_drop[NIC_DROP_SRC], 1);
	ck_assert_int_eq(nic_host_arp_sender(s.frame[0], 42, &ip, mac), 1);
	ck_assert_uint_eq(ip, box_addr.ip_be);
	ck_assert_mem_eq(mac, box_addr.mac, 6);
	ck_assert_uint_eq(t.lc->st.nic_drop[NIC_DROP_IP_CSUM], 1);
	ck_assert_uint_eq(t.lc->st.arp_replies, 1);
	ck_assert_uint_eq(t.lc->st.summed, 0);
}
END_TEST

/* After every test: each mbuf back in the pool, no result buffer still
 * referenced by a frame. */
static void teardown(void)
{
	uint32_t f;

	ck_assert_uint_eq(rte_ring_count(t.tx), 0);
	ck_assert_uint_eq(rte_mempool_avail_count(t.pool), t.pool_avail);
	for (f = 0; f < t.job->n_frags; f++) {
		ck_assert(!box_txref_inflight(ss_job_txref(t.job, f, 0)));
		ck_assert(!box_txref_inflight(ss_job_txref(t.job, f, 1)));
	}
}

Suite *box_suite(void)
{
	Suite *s = suite_create("box");
	TCase *tc = tcase_create("lcore");

	/* each test forks: EAL comes up in the test's own process */
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, round_completes_and_fans_out);
	tcase_add_test(tc, ack_and_error_replies);
	tcase_add_test(tc, probes_answered_from_the_state);
	tcase_add_test(tc, bad_frames_counted_arp_answered);
	suite_add_tcase(s, tc);
	return s;
}
