/* SPDX-License-Identifier: BSD-3-Clause */
/* nic/nic_wire: build, parse, and every reason a frame is refused. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <string.h>
#include <sodium.h>

#include "nic_host.h"
#include "nic_wire.h"
#include "test.h"

static const struct nic_addr worker = {.mac = {0x02, 0, 0, 0, 0, 0x11}, .ip_be = 0, .port = 9700};
static const struct nic_addr box = {.mac = {0x02, 0, 0, 0, 0, 0x01}, .ip_be = 0, .port = 9601};

static struct nic_addr W, B;
static struct nic_wire_expect exp_box;
static uint8_t frame[2048], payload[1024];

static void setup(void)
{
	W = worker;
	B = box;
	W.ip_be = htonl(0xc6120111); /* 198.18.1.17 */
	B.ip_be = htonl(0xc6120101); /* 198.18.1.1 */
	memset(&exp_box, 0, sizeof(exp_box));
	exp_box.ip_be = B.ip_be;
	exp_box.port_lo = 9600;
	exp_box.port_hi = 9603;
	exp_box.max_payload = 1024;
	exp_box.accept_ops = PBOX_OPS_TO_SS; /* as pboxd */
	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7 + 1);
}

static struct pbox_hdr push_hdr(uint16_t len)
{
	struct pbox_hdr h = {.op = PBOX_OP_PUSH,
			     .dtype = PBOX_DTYPE_FP32,
			     .flags = PBOX_F_RETRANS,
			     .rank = 3,
			     .job = 0xdeadbeef,
			     .chunk = 123456,
			     .frag = 7,
			     .len = len,
			     .round = 42,
			     .mac = 0x0123456789abcdefull};
	return h;
}

static void assert_hdr_eq(const struct pbox_hdr *a, const struct pbox_hdr *b)
{
	ck_assert_uint_eq(a->op, b->op);
	ck_assert_uint_eq(a->dtype, b->dtype);
	ck_assert_uint_eq(a->flags, b->flags);
	ck_assert_uint_eq(a->rank, b->rank);
	ck_assert_uint_eq(a->job, b->job);
	ck_assert_uint_eq(a->chunk, b->chunk);
	ck_assert_uint_eq(a->frag, b->frag);
	ck_assert_uint_eq(a->len, b->len);
	ck_assert_uint_eq(a->round, b->round);
	ck_assert_uint_eq(a->mac, b->mac);
}

/* A valid push of 1024 bytes; returns its length. */
static size_t good_push(void)
{
	struct pbox_hdr h = push_hdr(1024);
	size_t n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);

	ck_assert_uint_eq(n, NIC_HDRS_LEN + 1024);
	return n;
}

/* Recompute the IPv4 header checksum after a mutation. */
static void fix_ip_csum(void)
{
	uint8_t *ip = frame + NIC_ETH_LEN;
	size_t ihl = (size_t)(ip[0] & 15) * 4;

	ip[10] = ip[11] = 0;
	uint16_t c = (uint16_t)~nic_csum_fold(ip, ihl, 0);
	ip[10] = (uint8_t)(c >> 8);
	ip[11] = (uint8_t)c;
}

START_TEST(round_trip_every_op_and_dtype)
{
	for (uint8_t op = PBOX_OP_PUSH; op <= PBOX_OP_LAST; op++)
		for (uint8_t dt = 0; dt < PBOX_DTYPE_COUNT; dt++) {
			bool bare = op == PBOX_OP_ACK || op == PBOX_OP_PROBE ||
				    op == PBOX_OP_NACK || op == PBOX_OP_DONE;
			struct pbox_hdr h = push_hdr(op == PBOX_OP_ERROR ? 2 : bare ? 0 : 1000);
			struct nic_wire_expect e = exp_box;
			struct nic_pkt p;

			h.op = op;
			h.dtype = dt;
			e.accept_ops = 0; /* any */
			size_t n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
			ck_assert_int_eq(nic_wire_parse(frame, n, &e, &p), NIC_DROP_NONE);
			ck_assert_int_eq(p.kind, NIC_KIND_PBOX);
			assert_hdr_eq(&p.hdr, &h);
			ck_assert_uint_eq(p.payload_off, NIC_HDRS_LEN);
			ck_assert_mem_eq(frame + p.payload_off, payload, h.len);
			ck_assert_mem_eq(p.src_mac, W.mac, 6);
			ck_assert_uint_eq(p.src_ip_be, W.ip_be);
			ck_assert_uint_eq(p.dst_ip_be, B.ip_be);
			ck_assert_uint_eq(p.src_port, 9700);
			ck_assert_uint_eq(p.dst_port, 9601);
		}
}
END_TEST

START_TEST(layout_is_the_documented_one)
{
	size_t n = good_push();
	const uint8_t *h = frame + NIC_ETH_LEN + NIC_IP4_LEN + NIC_UDP_LEN;
	static const uint8_t want[PBOX_HDR_LEN] = {0x50, 0x42, 3,    1,	   0,	 1,    0x00, 0x03,
						   0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0xe2, 0x40,
						   0x00, 0x07, 0x04, 0x00, 0,	 0,    0,    42,
						   0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
	uint8_t got[PBOX_HDR_LEN];

	ck_assert_uint_eq(n, 1098);
	memcpy(got, h, sizeof(got));
	ck_assert_mem_eq(got, want, sizeof(want));
	/* IPv4: DF, TTL 64, UDP, total length 20 + 8 + 32 + 1024 */
	ck_assert_uint_eq(frame[14], 0x45);
	ck_assert_uint_eq(frame[16] << 8 | frame[17], 1084);
	ck_assert_uint_eq(frame[20], 0x40);
	ck_assert_uint_eq(frame[22], 64);
	ck_assert_uint_eq(frame[23], 17);
	ck_assert_uint_eq(frame[38] << 8 | frame[39], 1064); /* UDP length */
}
END_TEST

START_TEST(checksum_vectors)
{
	/* RFC 1071 section 3 */
	static const uint8_t rfc[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
	/* a textbook IPv4 header whose checksum is 0xb861 */
	static const uint8_t ip[] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
				     0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
	uint8_t z[sizeof(ip)];

	ck_assert_uint_eq(nic_csum_fold(rfc, sizeof(rfc), 0), 0xddf2);
	ck_assert_uint_eq(nic_csum_fold(ip, sizeof(ip), 0), 0xffff);
	memcpy(z, ip, sizeof(z));
	z[10] = z[11] = 0;
	ck_assert_uint_eq((uint16_t)~nic_csum_fold(z, sizeof(z), 0), 0xb861);
	ck_assert_uint_eq(nic_csum_fold("\x01", 1, 0), 0x0100);
}
END_TEST

/* Each mutation must be refused for its own reason. */
static void m_short(size_t *n)
{
	*n = 13;
}
static void m_vlan(size_t *n)
{
	(void)n;
	frame[12] = 0x81;
	frame[13] = 0x00;
}
static void m_ipv6(size_t *n)
{
	(void)n;
	frame[14] = 0x65;
}
static void m_tot_long(size_t *n)
{
	frame[16] = 0x05;
	frame[17] = 0x00; /* 1280 > what arrived */
	fix_ip_csum();
	(void)n;
}
static void m_csum(size_t *n)
{
	(void)n;
	frame[24] ^= 1;
}
static void m_frag(size_t *n)
{
	(void)n;
	frame[20] = 0x20; /* MF */
	fix_ip_csum();
}
static void m_dst(size_t *n)
{
	(void)n;
	frame[33] ^= 1;
	fix_ip_csum();
}
static void m_src_mac_bcast(size_t *n)
{
	(void)n;
	memset(frame + 6, 0xff, 6);
}
static void m_src_mac_mcast(size_t *n)
{
	(void)n;
	frame[6] = 0x01; /* 01:00:5e:...: IPv4 multicast */
}
static void m_src_ip(size_t *n, uint32_t ip_be)
{
	(void)n;
	memcpy(frame + 26, &ip_be, 4);
	fix_ip_csum();
}
static void m_src_bcast(size_t *n)
{
	m_src_ip(n, 0xffffffffu);
}
static void m_src_mcast(size_t *n)
{
	m_src_ip(n, htonl(0xe0000001u)); /* 224.0.0.1 */
}
static void m_src_zero(size_t *n)
{
	m_src_ip(n, 0);
}
static void m_src_own(size_t *n)
{
	(void)n;
	memcpy(frame + 26, frame + 30, 4); /* our own address as the source */
	fix_ip_csum();
}
static void m_proto(size_t *n)
{
	(void)n;
	frame[23] = 6; /* TCP */
	fix_ip_csum();
}
static void m_udp_len(size_t *n)
{
	(void)n;
	frame[39] ^= 4;
}
static void m_port(size_t *n)
{
	(void)n;
	frame[37] = 0x00; /* dst port 0x2500 = 9472 */
}
static void m_magic(size_t *n)
{
	(void)n;
	frame[42] = 'X';
}
static void m_version(size_t *n)
{
	(void)n;
	frame[44] = 1; /* version 1 carried a token where the MAC is now */
}
static void m_op(size_t *n)
{
	(void)n;
	frame[45] = PBOX_OP_RESULT; /* a box takes no results */
}
static void m_op_unknown(size_t *n)
{
	(void)n;
	frame[45] = 9;
}
static void m_dtype(size_t *n)
{
	(void)n;
	frame[46] = 3;
}
static void m_flags(size_t *n)
{
	(void)n;
	frame[47] = 0x80;
}
static void m_rcomp_bits(size_t *n)
{
	(void)n;
	frame[47] = 0x10; /* a result compressor, without the flag that says so */
}
static void m_rcomp_unknown(size_t *n)
{
	(void)n;
	frame[47] = PBOX_F_RCOMP | 6 << PBOX_F_RCOMP_SHIFT;
}
static void m_rcomp_sign(size_t *n)
{
	(void)n;
	frame[47] = PBOX_F_RCOMP | 1 << PBOX_F_RCOMP_SHIFT; /* a plain push, its sum signed */
}
static void m_rcomp_fp16(size_t *n)
{
	(void)n;
	frame[46] = PBOX_DTYPE_FP16; /* compressors are for fp32 alone */
	frame[47] = PBOX_F_RCOMP | 1 << PBOX_F_RCOMP_SHIFT;
}
static void m_len(size_t *n)
{
	(void)n;
	frame[60] = 0x03; /* claims 768 of 1024 */
}
static void m_len_odd(size_t *n)
{
	/* 1022 bytes of fp32: not whole elements; all lengths consistent */
	struct pbox_hdr h = push_hdr(1022);
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
}
static void m_len_big(size_t *n)
{
	struct pbox_hdr h = push_hdr(1028); /* over the fragment size */
	static uint8_t big[1028];
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, big);
}
static void m_len_zero(size_t *n)
{
	struct pbox_hdr h = push_hdr(0);
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
}
static void m_rest_turn(size_t *n)
{
	struct pbox_hdr h = push_hdr(0);
	h.flags = PBOX_F_REST; /* a rooted chunk's turns for the rest of its chunk */
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
}
static void m_rest_data(size_t *n)
{
	struct pbox_hdr h = push_hdr(1024);
	h.flags = PBOX_F_REST; /* turns are empty */
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
}
static void m_rest_probe(size_t *n)
{
	struct pbox_hdr h = push_hdr(0);
	h.op = PBOX_OP_PROBE; /* a probe asks for one fragment */
	h.flags = PBOX_F_REST;
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
}
static void m_probe_payload(size_t *n)
{
	struct pbox_hdr h = push_hdr(4);
	h.op = PBOX_OP_PROBE;
	*n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
}
static void m_op_nack_to_box(size_t *n)
{
	(void)n;
	frame[45] = PBOX_OP_NACK;
}

static const struct {
	void (*mutate)(size_t *n);
	enum nic_drop want;
	const char *what;
} mutations[] = {
	{m_short, NIC_DROP_SHORT, "13 bytes"},
	{m_vlan, NIC_DROP_ETHERTYPE, "VLAN tag"},
	{m_ipv6, NIC_DROP_IP_HDR, "IP version 6"},
	{m_tot_long, NIC_DROP_IP_HDR, "IP total length beyond the frame"},
	{m_csum, NIC_DROP_IP_CSUM, "IP checksum"},
	{m_frag, NIC_DROP_IP_FRAG, "more fragments"},
	{m_dst, NIC_DROP_IP_DST, "someone else's address"},
	{m_proto, NIC_DROP_IP_PROTO, "TCP"},
	{m_udp_len, NIC_DROP_UDP_LEN, "UDP length"},
	{m_port, NIC_DROP_UDP_PORT, "UDP port"},
	{m_magic, NIC_DROP_MAGIC, "magic"},
	{m_version, NIC_DROP_VERSION, "version"},
	{m_op, NIC_DROP_OP, "result sent to a box"},
	{m_op_unknown, NIC_DROP_OP, "op 9"},
	{m_dtype, NIC_DROP_DTYPE, "dtype 3"},
	{m_flags, NIC_DROP_FLAGS, "unknown flag"},
	{m_rcomp_bits, NIC_DROP_FLAGS, "result compressor without PBOX_F_RCOMP"},
	{m_rcomp_unknown, NIC_DROP_DTYPE, "result compressor 6"},
	{m_rcomp_sign, NIC_DROP_NONE, "a plain push asking for a signed sum"},
	{m_rcomp_fp16, NIC_DROP_DTYPE, "fp16 push asking for a compressed sum"},
	{m_len, NIC_DROP_LEN, "length field"},
	{m_len_odd, NIC_DROP_LEN, "partial element"},
	{m_len_big, NIC_DROP_LEN, "over the fragment size"},
	{m_len_zero, NIC_DROP_NONE, "empty push (a rooted chunk's turn: the SS checks it)"},
	{m_rest_turn, NIC_DROP_NONE, "empty push standing for the rest of its chunk"},
	{m_rest_data, NIC_DROP_FLAGS, "push with data standing for the rest of its chunk"},
	{m_rest_probe, NIC_DROP_FLAGS, "probe standing for the rest of its chunk"},
	{m_probe_payload, NIC_DROP_LEN, "probe with a payload"},
	{m_op_nack_to_box, NIC_DROP_OP, "NACK sent to a box"},
	{m_src_mac_bcast, NIC_DROP_SRC, "broadcast source MAC"},
	{m_src_mac_mcast, NIC_DROP_SRC, "multicast source MAC"},
	{m_src_bcast, NIC_DROP_SRC, "source 255.255.255.255"},
	{m_src_mcast, NIC_DROP_SRC, "source 224.0.0.1"},
	{m_src_zero, NIC_DROP_SRC, "source 0.0.0.0"},
	{m_src_own, NIC_DROP_SRC, "our own address as the source"},
};

START_TEST(every_reason_to_refuse)
{
	bool seen[NIC_DROP_COUNT] = {false};

	for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
		struct nic_pkt p;
		size_t n = good_push();

		mutations[i].mutate(&n);
		enum nic_drop got = nic_wire_parse(frame, n, &exp_box, &p);
		ck_assert_msg(got == mutations[i].want, "%s: got '%s', want '%s'",
			      mutations[i].what, nic_drop_name(got),
			      nic_drop_name(mutations[i].want));
		seen[got] = true;
	}
	for (int d = NIC_DROP_NONE + 1; d < NIC_DROP_COUNT; d++)
		ck_assert_msg(seen[d], "no test refuses a frame for '%s'",
			      nic_drop_name((enum nic_drop)d));
}
END_TEST

/* An empty RESULT may stand for its whole chunk (PBOX_F_REST, a reduce's
 * other ranks); one with data, an ACK, may not. A worker takes it. */
START_TEST(rest_results_to_a_worker)
{
	struct nic_wire_expect to_worker = exp_box;
	static const struct {
		uint8_t op;
		uint16_t len;
		enum nic_drop want;
	} cases[] = {
		{PBOX_OP_RESULT, 0, NIC_DROP_NONE},
		{PBOX_OP_RESULT, 1024, NIC_DROP_FLAGS},
		{PBOX_OP_ACK, 0, NIC_DROP_FLAGS},
	};

	to_worker.accept_ops = PBOX_OPS_TO_WORKER;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pbox_hdr h = push_hdr(cases[i].len);
		struct nic_pkt p;
		size_t n;

		h.op = cases[i].op;
		h.flags = PBOX_F_REST;
		n = nic_wire_build(frame, sizeof(frame), &W, &B, &h, payload);
		ck_assert_msg(nic_wire_parse(frame, n, &to_worker, &p) == cases[i].want,
			      "case %zu: %s", i,
			      nic_drop_name(nic_wire_parse(frame, n, &to_worker, &p)));
		if (cases[i].want == NIC_DROP_NONE)
			ck_assert_uint_eq(p.hdr.flags, PBOX_F_REST);
	}
}
END_TEST

START_TEST(every_truncation_refused)
{
	size_t n = good_push();
	struct nic_pkt p;

	for (size_t cut = 0; cut < n; cut++) {
		enum nic_drop d = nic_wire_parse(frame, cut, &exp_box, &p);

		if (d == NIC_DROP_NONE)
			ck_abort_msg("a frame cut to %zu of %zu bytes was accepted", cut, n);
	}
	/* Ethernet padding after the datagram is fine */
	ck_assert_int_eq(nic_wire_parse(frame, n + 20, &exp_box, &p), NIC_DROP_NONE);
	ck_assert_uint_eq(p.hdr.len, 1024);
}
END_TEST

START_TEST(arp_and_icmp_are_classified)
{
	struct nic_pkt p;
	size_t n;

	good_push(); /* an ARP frame: the push's bytes with EtherType 0x0806 */
	frame[12] = 0x08;
	frame[13] = 0x06;
	ck_assert_int_eq(nic_wire_parse(frame, 42, &exp_box, &p), NIC_DROP_NONE);
	ck_assert_int_eq(p.kind, NIC_KIND_ARP);
	ck_assert_int_eq(nic_wire_parse(frame, 41, &exp_box, &p), NIC_DROP_SHORT);

	n = good_push();
	frame[23] = 1;
	fix_ip_csum();
	ck_assert_int_eq(nic_wire_parse(frame, n, &exp_box, &p), NIC_DROP_NONE);
	ck_assert_int_eq(p.kind, NIC_KIND_ICMP);
	ck_assert_uint_eq(p.l4_off, 34);
}
END_TEST

/* The ARP request a worker sends for the box's address, by hand. */
static size_t arp_request(uint32_t target_be)
{
	static const uint8_t req[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0,   0, 0,
				      0,    0x11, 0x08, 0x06, 0,    1,	  0x08, 0,   6, 4,
				      0,    1,	  0x02, 0,    0,    0,	  0,	0x11};

	memset(frame, 0, 60);
	memcpy(frame, req, sizeof(req));
	memcpy(frame + 28, &W.ip_be, 4);
	memcpy(frame + 38, &target_be, 4);
	return 60; /* padded to the Ethernet minimum */
}

/* An ARP request from no single host (a zero, broadcast or multicast
 * sender, or one claiming our own address) is refused by the parser, so it
 * is never answered: the answer would go to everyone. */
START_TEST(arp_from_no_host_refused)
{
	const struct nic_wire_expect exp = {.ip_be = B.ip_be};
	static const uint32_t bad_ip[] = {0, 0xffffffffu, 0x010000e0u /* 224.0.0.1 */};
	struct nic_pkt p;
	unsigned i;

	ck_assert_int_eq(nic_wire_parse(frame, arp_request(B.ip_be), &exp, &p), NIC_DROP_NONE);
	ck_assert_int_eq(p.kind, NIC_KIND_ARP);
	for (i = 0; i < sizeof(bad_ip) / sizeof(bad_ip[0]); i++) {
		arp_request(B.ip_be);
		memcpy(frame + 28, &bad_ip[i], 4);
		ck_assert_int_eq(nic_wire_parse(frame, 60, &exp, &p), NIC_DROP_SRC);
	}
	arp_request(B.ip_be);
	memcpy(frame + 28, &B.ip_be, 4); /* someone claims our address */
	ck_assert_int_eq(nic_wire_parse(frame, 60, &exp, &p), NIC_DROP_SRC);
	arp_request(B.ip_be);
	memset(frame + 22, 0xff, 6); /* sender hardware address: broadcast */
	ck_assert_int_eq(nic_wire_parse(frame, 60, &exp, &p), NIC_DROP_SRC);
	arp_request(B.ip_be);
	memset(frame + 6, 0, 6); /* Ethernet source all zero */
	ck_assert_int_eq(nic_wire_parse(frame, 60, &exp, &p), NIC_DROP_SRC);
}
END_TEST

START_TEST(arp_requests_for_us_answered)
{
	uint8_t before[60];

	ck_assert_uint_eq(nic_host_arp_reply(frame, arp_request(B.ip_be), B.mac, B.ip_be), 60);
	ck_assert(memcmp(frame, W.mac, 6) == 0);     /* back to the sender */
	ck_assert(memcmp(frame + 6, B.mac, 6) == 0); /* from us */
	ck_assert_uint_eq(frame[21], 2);	     /* a reply */
	ck_assert(memcmp(frame + 22, B.mac, 6) == 0 && memcmp(frame + 28, &B.ip_be, 4) == 0);
	ck_assert(memcmp(frame + 32, W.mac, 6) == 0 && memcmp(frame + 38, &W.ip_be, 4) == 0);

	/* for someone else, a reply, short, or not Ethernet/IPv4: untouched */
	arp_request(B.ip_be + 1);
	memcpy(before, frame, 60);
	ck_assert_uint_eq(nic_host_arp_reply(frame, 60, B.mac, B.ip_be), 0);
	frame[38] ^= 1;
	frame[21] = 2;
	ck_assert_uint_eq(nic_host_arp_reply(frame, 60, B.mac, B.ip_be), 0);
	arp_request(B.ip_be);
	ck_assert_uint_eq(nic_host_arp_reply(frame, 41, B.mac, B.ip_be), 0);
	frame[17] = 0xdd; /* protocol type IPv6 */
	ck_assert_uint_eq(nic_host_arp_reply(frame, 60, B.mac, B.ip_be), 0);
	ck_assert_uint_eq(frame[21], 1);
}
END_TEST

/* The worker's side: its request is the one built by hand above, and the
 * sender of a request or of the box's reply is learnt; nothing else is. */
START_TEST(arp_request_built_and_sender_learnt)
{
	uint8_t built[NIC_ARP_FRAME_LEN], mac[6];
	uint32_t ip = 0;

	ck_assert_uint_eq(nic_host_arp_request(built, W.mac, W.ip_be, B.ip_be), 60);
	ck_assert_uint_eq(arp_request(B.ip_be), 60);
	ck_assert_mem_eq(built, frame, 60);
	ck_assert_int_eq(nic_host_arp_sender(frame, 60, &ip, mac), 1);
	ck_assert(ip == W.ip_be && memcmp(mac, W.mac, 6) == 0);
	ck_assert_uint_eq(nic_host_arp_reply(frame, 60, B.mac, B.ip_be), 60);
	ck_assert_int_eq(nic_host_arp_sender(frame, 60, &ip, mac), 1);
	ck_assert(ip == B.ip_be && memcmp(mac, B.mac, 6) == 0);

	ck_assert_int_eq(nic_host_arp_sender(frame, 41, &ip, mac), 0); /* short */
	frame[21] = 3;						       /* RARP */
	ck_assert_int_eq(nic_host_arp_sender(frame, 60, &ip, mac), 0);
	frame[21] = 2;
	frame[22] |= 1; /* a multicast sender */
	ck_assert_int_eq(nic_host_arp_sender(frame, 60, &ip, mac), 0);
	frame[22] &= 0xfe;
	frame[12] = 0x86; /* not ARP */
	ck_assert_int_eq(nic_host_arp_sender(frame, 60, &ip, mac), 0);
}
END_TEST

START_TEST(icmp_echo_answered)
{
	struct nic_pkt p;
	struct nic_wire_expect to_worker = {.ip_be = W.ip_be};
	size_t n = good_push();
	uint8_t *icmp = frame + 34;

	/* turn the push into an echo request with the same bytes as data */
	frame[23] = 1;
	fix_ip_csum();
	icmp[0] = 8;
	icmp[1] = 0;
	icmp[2] = icmp[3] = 0;
	{
		uint16_t c = (uint16_t)~nic_csum_fold(icmp, n - 34, 0);

		icmp[2] = (uint8_t)(c >> 8);
		icmp[3] = (uint8_t)c;
	}
	ck_assert_int_eq(nic_wire_parse(frame, n, &exp_box, &p), NIC_DROP_NONE);
	ck_assert_uint_eq(nic_host_icmp_reply(frame, n, &p, B.mac), n);
	ck_assert_uint_eq(icmp[0], 0);
	ck_assert_uint_eq(nic_csum_fold(icmp, n - 34, 0), 0xffff);
	ck_assert(memcmp(frame, W.mac, 6) == 0 && memcmp(frame + 6, B.mac, 6) == 0);
	/* the reply is a valid IPv4 ICMP datagram to the worker */
	ck_assert_int_eq(nic_wire_parse(frame, n, &to_worker, &p), NIC_DROP_NONE);
	ck_assert_int_eq(p.kind, NIC_KIND_ICMP);
	ck_assert_uint_eq(p.src_ip_be, B.ip_be);
	/* a reply is not answered, nor a request with a bad checksum */
	ck_assert_uint_eq(nic_host_icmp_reply(frame, n, &p, B.mac), 0);
	icmp[0] = 8;
	ck_assert_uint_eq(nic_host_icmp_reply(frame, n, &p, B.mac), 0);
}
END_TEST

START_TEST(header_alone_for_sockets)
{
	struct pbox_hdr h = push_hdr(64), g;
	uint8_t buf[PBOX_HDR_LEN + 64] = {0};

	nic_wire_put_hdr(buf, &h);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, sizeof(buf), &exp_box, &g), NIC_DROP_NONE);
	assert_hdr_eq(&g, &h);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, sizeof(buf) - 1, &exp_box, &g), NIC_DROP_LEN);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, 31, &exp_box, &g), NIC_DROP_SHORT);
	ck_assert_str_eq(nic_drop_name(NIC_DROP_IP_CSUM), "IPv4 header checksum wrong");
	ck_assert_uint_eq(nic_wire_build(frame, NIC_HDRS_LEN + 63, &W, &B, &h, payload), 0);
}
END_TEST

/* The dtype byte's high nibble is a compressed payload's compressor
 * (appliance/ss/comp.h): taken for fp32 at any length the SS then checks
 * against the scheme, refused past the last scheme or with fp16 data. */
START_TEST(compressed_dtype_byte)
{
	struct pbox_hdr h = push_hdr(37), g;
	uint8_t buf[PBOX_HDR_LEN + 37] = {0};

	h.dtype = PBOX_DTYPE_FP32 | 1u << PBOX_COMP_SHIFT; /* sign: 4 + ceil(n / 8) bytes */
	nic_wire_put_hdr(buf, &h);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, sizeof(buf), &exp_box, &g), NIC_DROP_NONE);
	ck_assert_uint_eq(pbox_hdr_dtype(&g), PBOX_DTYPE_FP32);
	ck_assert_uint_eq(pbox_hdr_comp(&g), 1);
	h.dtype = PBOX_DTYPE_FP32 | PBOX_COMP_COUNT << PBOX_COMP_SHIFT;
	nic_wire_put_hdr(buf, &h);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, sizeof(buf), &exp_box, &g), NIC_DROP_DTYPE);
	h.dtype = PBOX_DTYPE_FP16 | 1u << PBOX_COMP_SHIFT;
	nic_wire_put_hdr(buf, &h);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, sizeof(buf), &exp_box, &g), NIC_DROP_DTYPE);
	h.dtype = PBOX_DTYPE_FP32; /* uncompressed fp32: whole elements only */
	nic_wire_put_hdr(buf, &h);
	ck_assert_int_eq(nic_wire_parse_hdr(buf, sizeof(buf), &exp_box, &g), NIC_DROP_LEN);
}
END_TEST

/* The MAC: any header field changed, another key or another incarnation
 * fails it; HEADER mode leaves the payload to the network, PAYLOAD mode
 * does not; OFF is 0. The payload's digest, taken once, gives the same MAC
 * as the whole datagram's. */
START_TEST(mac_covers_what_it_says)
{
	struct pbox_hdr h = push_hdr(64), x;
	uint8_t key[NIC_KEY_LEN], key2[NIC_KEY_LEN], pay[64];
	struct nic_mac hm, pm, om, other;

	for (unsigned i = 0; i < sizeof(pay); i++)
		pay[i] = (uint8_t)i;
	nic_job_key(0x1234, 7, 1, key);
	nic_job_key(0x1234, 7, 2, key2); /* the next incarnation */
	ck_assert(memcmp(key, key2, sizeof(key)) != 0);
	nic_mac_init(&hm, NIC_MAC_HEADER, key);
	nic_mac_init(&pm, NIC_MAC_PAYLOAD, key);
	nic_mac_init(&om, NIC_MAC_OFF, key);
	nic_mac_init(&other, NIC_MAC_HEADER, key2);
	h.mac = nic_mac_of(&hm, &h, pay);
	ck_assert(nic_mac_ok(&hm, &h, pay));
	ck_assert(!nic_mac_ok(&other, &h, pay));
	for (unsigned f = 0; f < 9; f++) { /* every field the header carries */
		x = h;
		switch (f) {
		case 0:
			x.op++;
			break;
		case 1:
			x.dtype++;
			break;
		case 2:
			x.flags ^= 1;
			break;
		case 3:
			x.rank++;
			break;
		case 4:
			x.job++;
			break;
		case 5:
			x.chunk++;
			break;
		case 6:
			x.frag++;
			break;
		case 7:
			x.len -= 4;
			break;
		default:
			x.round++;
			break;
		}
		ck_assert_msg(!nic_mac_ok(&hm, &x, pay), "field %u not covered", f);
	}
	pay[9] ^= 1; /* header mode: the payload is the network's to keep */
	ck_assert(nic_mac_ok(&hm, &h, pay));
	pay[9] ^= 1;
	h.mac = nic_mac_of(&pm, &h, pay);
	ck_assert_uint_eq(h.mac, nic_mac_hdr(&pm, &h, nic_mac_digest(&pm, pay, sizeof(pay))));
	pay[9] ^= 1;
	ck_assert(!nic_mac_ok(&pm, &h, pay));
	ck_assert_uint_eq(nic_mac_of(&om, &h, pay), 0);
	ck_assert_str_eq(nic_mac_mode_name(NIC_MAC_PAYLOAD), "payload");
	ck_assert_int_eq(nic_mac_mode_parse("header"), NIC_MAC_HEADER);
	ck_assert_int_eq(nic_mac_mode_parse("sha1"), -1);
}
END_TEST

/* NH as nic_nh.h defines it, written plainly: block by block, pair by
 * pair, a word at a time from its bytes. */
static void nh_reference(const uint8_t *p, size_t len, const uint32_t *k, uint64_t *out)
{
	for (size_t off = 0; off < len; off += NIC_NH_BLOCK, out += 2) {
		size_t n = len - off;

		if (n > NIC_NH_BLOCK)
			n = NIC_NH_BLOCK;
		out[0] = out[1] = 0;
		for (size_t i = 0; 4 * i < n; i += 2) {
			uint32_t w[2] = {0, 0};

			for (size_t b = 0; b < 8 && 4 * i + b < n; b++)
				w[b / 4] |= (uint32_t)p[off + 4 * i + b] << (8 * (b % 4));
			out[0] += (uint64_t)(uint32_t)(w[0] + k[i]) * (uint32_t)(w[1] + k[i + 1]);
			out[1] +=
				(uint64_t)(uint32_t)(w[0] + k[i + 2]) * (uint32_t)(w[1] + k[i + 3]);
		}
	}
}

/* Every NH variant the CPU runs agrees with the plain definition to the
 * bit, at every length up to a little over two blocks, a few larger ones,
 * and every alignment of the payload in a 64-byte line; each writes its
 * two words per block and nothing past them. */
START_TEST(nh_variants_agree)
{
	static uint8_t buf[3 * NIC_NH_BLOCK + 128];
	static const char *const isa[] = {"scalar", "avx2", "avx512"};
	uint64_t want[2 * 8 + 1], got[2 * 8 + 1];
	uint32_t k[NIC_NH_KEY_WORDS];
	unsigned ran = 0;

	randombytes_buf(buf, sizeof(buf));
	randombytes_buf(k, sizeof(k));
	for (unsigned v = 0; v < 3; v++) {
		nic_nh_fn fn = nic_nh_named(isa[v]);

		if (!fn)
			continue;
		ran++;
		for (size_t len = 0; len <= 3 * NIC_NH_BLOCK;
		     len += len < 2 * NIC_NH_BLOCK + 80 ? 1 : 61)
			for (size_t al = 0; al < 64; al += len % 8 ? 63 : 7) {
				size_t words = 2 * ((len + NIC_NH_BLOCK - 1) / NIC_NH_BLOCK);

				nh_reference(buf + al, len, k, want);
				memset(got, 0xa5, sizeof(got));
				fn(buf + al, len, k, got);
				ck_assert_msg(memcmp(want, got, 8 * words) == 0,
					      "%s: len %zu at +%zu", isa[v], len, al);
				ck_assert_msg(got[words] == 0xa5a5a5a5a5a5a5a5ull,
					      "%s: len %zu wrote past its words", isa[v], len);
			}
	}
	ck_assert_uint_ge(ran, 1);
	ck_assert_ptr_eq(nic_nh_named("sse9"), NULL);
}
END_TEST

/* PAYLOAD mode refuses a datagram whose payload differs in any one bit, at
 * any place of a full 8 KiB fragment (a bit in each byte, and every bit of
 * the last block's last word), and one that swaps two blocks; the key's
 * next incarnation gives another digest. */
START_TEST(payload_mac_covers_every_byte)
{
	static uint8_t pay[8192];
	struct pbox_hdr h = push_hdr(sizeof(pay));
	uint8_t key[NIC_KEY_LEN], key2[NIC_KEY_LEN];
	struct nic_mac pm, pm2;

	randombytes_buf(pay, sizeof(pay));
	nic_job_key(0x1234, 7, 1, key);
	nic_job_key(0x1234, 7, 2, key2);
	nic_mac_init(&pm, NIC_MAC_PAYLOAD, key);
	nic_mac_init(&pm2, NIC_MAC_PAYLOAD, key2);
	h.mac = nic_mac_of(&pm, &h, pay);
	ck_assert(nic_mac_ok(&pm, &h, pay));
	ck_assert(!nic_mac_ok(&pm2, &h, pay));
	for (size_t i = 0; i < sizeof(pay); i++)
		for (unsigned bit = i < sizeof(pay) - 4 ? (unsigned)(i % 8) : 0;
		     bit < (i < sizeof(pay) - 4 ? i % 8 + 1 : 8); bit++) {
			pay[i] ^= (uint8_t)(1u << bit);
			ck_assert_msg(!nic_mac_ok(&pm, &h, pay), "byte %zu bit %u not covered", i,
				      bit);
			pay[i] ^= (uint8_t)(1u << bit);
		}
	{
		uint8_t tmp[NIC_NH_BLOCK];

		memcpy(tmp, pay, sizeof(tmp));
		memcpy(pay, pay + NIC_NH_BLOCK, sizeof(tmp));
		memcpy(pay + NIC_NH_BLOCK, tmp, sizeof(tmp));
		ck_assert(!nic_mac_ok(&pm, &h, pay));
		memcpy(pay + NIC_NH_BLOCK, pay, sizeof(tmp));
		memcpy(pay, tmp, sizeof(tmp));
	}
	ck_assert(nic_mac_ok(&pm, &h, pay));
}
END_TEST

Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("format");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, round_trip_every_op_and_dtype);
	tcase_add_test(tc, rest_results_to_a_worker);
	tcase_add_test(tc, layout_is_the_documented_one);
	tcase_add_test(tc, checksum_vectors);
	tcase_add_test(tc, every_reason_to_refuse);
	tcase_add_test(tc, every_truncation_refused);
	tcase_add_test(tc, arp_and_icmp_are_classified);
	tcase_add_test(tc, header_alone_for_sockets);
	tcase_add_test(tc, compressed_dtype_byte);
	tcase_add_test(tc, arp_requests_for_us_answered);
	tcase_add_test(tc, arp_from_no_host_refused);
	tcase_add_test(tc, arp_request_built_and_sender_learnt);
	tcase_add_test(tc, icmp_echo_answered);
	tcase_add_test(tc, mac_covers_what_it_says);
	tcase_add_test(tc, nh_variants_agree);
	tcase_add_test(tc, payload_mac_covers_every_byte);
	suite_add_tcase(s, tc);
	return s;
}
