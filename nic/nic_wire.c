/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Wire format: build and validate. Data path: no allocation, no I/O.
 * Fields are read and written a byte at a time (nic_be16() and kin, in
 * nic_wire.h): frames may sit at any alignment, and the compiler turns these into
 * single loads with a byte swap.
 */
#include "nic_wire.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

_Static_assert(NIC_HDRS_LEN == 74, "header sizes changed: update nic/WIRE.md");
_Static_assert(crypto_shorthash_siphash24_KEYBYTES == 16 && crypto_shorthash_siphash24_BYTES == 8,
	       "SipHash-2-4 key and output sizes");

static const char *const drop_names[NIC_DROP_COUNT] = {[NIC_DROP_NONE] = "none",
#define NIC__DROP_NAME(n, id, s) [NIC_DROP_##n] = s,
						       NIC_FOREACH_DROP(NIC__DROP_NAME)
#undef NIC__DROP_NAME
};

static const char *const drop_ids[NIC_DROP_COUNT] = {[NIC_DROP_NONE] = "none",
#define NIC__DROP_ID(n, id, s) [NIC_DROP_##n] = #id,
						     NIC_FOREACH_DROP(NIC__DROP_ID)
#undef NIC__DROP_ID
};

const char *nic_err_text(unsigned code)
{
	switch (code) {
	case PBOX_ERR_NO_JOB:
		return "the job is not registered there";
	case PBOX_ERR_BAD_TOKEN:
		return "the job token is refused (wire version 1)";
	case PBOX_ERR_RANGE:
		return "rank, chunk or fragment out of the job's range: the layouts differ";
	case PBOX_ERR_DTYPE:
		return "the dtype is not the job's";
	case PBOX_ERR_LEN:
		return "the payload length is not the fragment's";
	default:
		return "an unknown error code";
	}
}

static const char *const dtype_names[PBOX_DTYPE_COUNT] = {"fp32", "fp16", "bf16"};

const char *nic_dtype_name(unsigned t)
{
	return t < PBOX_DTYPE_COUNT ? dtype_names[t] : "?";
}

int nic_dtype_parse(const char *s)
{
	unsigned t;

	for (t = 0; t < PBOX_DTYPE_COUNT; t++)
		if (strcmp(s, dtype_names[t]) == 0)
			return (int)t;
	return -1;
}

const char *nic_drop_name(enum nic_drop d)
{
	return (unsigned)d < NIC_DROP_COUNT ? drop_names[d] : "?";
}

const char *nic_drop_id(enum nic_drop d)
{
	return (unsigned)d < NIC_DROP_COUNT ? drop_ids[d] : "?";
}

uint16_t nic_csum_fold(const void *p, size_t len, uint32_t sum)
{
	const uint8_t *b = p;
	uint64_t s = sum;
	size_t i;

	for (i = 0; i + 1 < len; i += 2)
		s += nic_be16(b + i);
	if (len & 1)
		s += (uint32_t)b[len - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

static const char *const mac_names[NIC_MAC_MODES] = {"off", "header", "payload"};

const char *nic_mac_mode_name(unsigned m)
{
	return m < NIC_MAC_MODES ? mac_names[m] : "?";
}

int nic_mac_mode_parse(const char *s)
{
	unsigned m;

	for (m = 0; m < NIC_MAC_MODES; m++)
		if (strcmp(s, mac_names[m]) == 0)
			return (int)m;
	return -1;
}

void nic_mac_init(struct nic_mac *m, unsigned mode, const uint8_t *key)
{
	static const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = "pbox nh";
	static const char label[] = "pbox nh key v1";
	uint8_t seed[crypto_stream_chacha20_KEYBYTES];

	m->mode = (uint8_t)(mode < NIC_MAC_MODES ? mode : NIC_MAC_PAYLOAD);
	memcpy(m->k_hdr, key, sizeof(m->k_hdr));
	memcpy(m->k_pay, key + sizeof(m->k_hdr), sizeof(m->k_pay));
	m->nh = nic_nh_best();
	/* NH wants independent uniform key words: ChaCha20's stream under a
	 * key of its own, derived from the job's. */
	crypto_generichash(seed, sizeof(seed), (const uint8_t *)label, sizeof(label), key,
			   NIC_KEY_LEN);
	crypto_stream_chacha20((uint8_t *)m->k_nh, sizeof(m->k_nh), nonce, seed);
	sodium_memzero(seed, sizeof(seed));
}

void nic_job_key(uint64_t secret, uint32_t job, uint64_t nonce, uint8_t *key)
{
	static const char label[] = "pbox job key v1";
	uint8_t m[sizeof(label) + 20];

	memcpy(m, label, sizeof(label));
	nic_put32(m + sizeof(label), (uint32_t)(secret >> 32));
	nic_put32(m + sizeof(label) + 4, (uint32_t)secret);
	nic_put32(m + sizeof(label) + 8, job);
	nic_put32(m + sizeof(label) + 12, (uint32_t)(nonce >> 32));
	nic_put32(m + sizeof(label) + 16, (uint32_t)nonce);
	crypto_generichash(key, NIC_KEY_LEN, m, sizeof(m), NULL, 0);
	sodium_memzero(m, sizeof(m));
}

static uint64_t siphash(const uint8_t *key, const void *p, size_t len)
{
	uint8_t out[8];

	crypto_shorthash_siphash24(out, p, len, key);
	return (uint64_t)nic_be32(out) << 32 | nic_be32(out + 4);
}

/* The payload's NH words, little-endian, under k_pay: the digest. The
 * largest payload a header can say (h->len, 16 bits) has 2 * 64 words. */
uint64_t nic_mac_digest(const struct nic_mac *m, const void *payload, size_t len)
{
	uint64_t w[2 * ((UINT16_MAX + NIC_NH_BLOCK - 1) / NIC_NH_BLOCK)];
	uint8_t b[sizeof(w)];
	size_t i, j, n;

	if (m->mode != NIC_MAC_PAYLOAD)
		return 0;
	if (len > UINT16_MAX) /* h->len is 16 bits: never from the wire */
		len = UINT16_MAX;
	n = 2 * ((len + NIC_NH_BLOCK - 1) / NIC_NH_BLOCK);
	m->nh(payload, len, m->k_nh, w);
	for (i = 0; i < n; i++)
		for (j = 0; j < 8; j++)
			b[8 * i + j] = (uint8_t)(w[i] >> (8 * j));
	return siphash(m->k_pay, b, 8 * n);
}

/* Header bytes 0..23: what the MAC covers, and what the wire carries. */
static void put_hdr_fields(uint8_t *p, const struct pbox_hdr *h)
{
	nic_put16(p + 0, PBOX_MAGIC);
	p[2] = PBOX_WIRE_VERSION;
	p[3] = h->op;
	p[4] = h->dtype;
	p[5] = h->flags;
	nic_put16(p + 6, h->rank);
	nic_put32(p + 8, h->job);
	nic_put32(p + 12, h->chunk);
	nic_put16(p + 16, h->frag);
	nic_put16(p + 18, h->len);
	nic_put32(p + 20, h->round);
}

uint64_t nic_mac_hdr(const struct nic_mac *m, const struct pbox_hdr *h, uint64_t digest)
{
	uint8_t b[32];

	if (m->mode == NIC_MAC_OFF)
		return 0;
	put_hdr_fields(b, h);
	nic_put32(b + 24, (uint32_t)(digest >> 32));
	nic_put32(b + 28, (uint32_t)digest);
	return siphash(m->k_hdr, b, sizeof(b));
}

void nic_wire_put_hdr(void *dst, const struct pbox_hdr *h)
{
	uint8_t *p = dst;

	put_hdr_fields(p, h);
	nic_put32(p + 24, (uint32_t)(h->mac >> 32));
	nic_put32(p + 28, (uint32_t)h->mac);
}

enum nic_drop nic_wire_parse_hdr(const void *src, size_t n, const struct nic_wire_expect *exp,
				 struct pbox_hdr *h)
{
	const uint8_t *p = src;

	if (n < PBOX_HDR_LEN)
		return NIC_DROP_SHORT;
	if (nic_be16(p) != PBOX_MAGIC)
		return NIC_DROP_MAGIC;
	if (p[2] != PBOX_WIRE_VERSION)
		return NIC_DROP_VERSION;
	h->op = p[3];
	if (h->op < PBOX_OP_PUSH || h->op > PBOX_OP_LAST ||
	    (exp->accept_ops && !(exp->accept_ops & (1u << h->op))))
		return NIC_DROP_OP;
	h->dtype = p[4];
	if (pbox_hdr_dtype(h) >= PBOX_DTYPE_COUNT || pbox_hdr_comp(h) >= PBOX_COMP_COUNT ||
	    (pbox_hdr_comp(h) && pbox_hdr_dtype(h) != PBOX_DTYPE_FP32))
		return NIC_DROP_DTYPE;
	h->flags = p[5];
	if (h->flags & ~PBOX_F_KNOWN ||
	    (h->flags & PBOX_F_RCOMP_MASK && !(h->flags & PBOX_F_RCOMP)) ||
	    (h->flags & PBOX_F_RCOMP && h->op != PBOX_OP_PUSH && h->op != PBOX_OP_PROBE) ||
	    (h->flags & PBOX_F_REST && h->op != PBOX_OP_PUSH && h->op != PBOX_OP_RESULT))
		return NIC_DROP_FLAGS;
	if (pbox_hdr_rcomp(h) >= PBOX_COMP_COUNT ||
	    (pbox_hdr_rcomp(h) && pbox_hdr_dtype(h) != PBOX_DTYPE_FP32))
		return NIC_DROP_DTYPE;
	h->rank = nic_be16(p + 6);
	h->job = nic_be32(p + 8);
	h->chunk = nic_be32(p + 12);
	h->frag = nic_be16(p + 16);
	h->len = nic_be16(p + 18);
	h->round = nic_be32(p + 20);
	h->mac = (uint64_t)nic_be32(p + 24) << 32 | nic_be32(p + 28);
	if (h->len != n - PBOX_HDR_LEN)
		return NIC_DROP_LEN;
	if (h->flags & PBOX_F_REST && h->len) /* a chunk's turns, or empty results */
		return NIC_DROP_FLAGS;
	if (h->op == PBOX_OP_ERROR)
		return h->len == 2 ? NIC_DROP_NONE : NIC_DROP_LEN;
	if (h->op == PBOX_OP_ACK || h->op == PBOX_OP_PROBE || h->op == PBOX_OP_NACK ||
	    h->op == PBOX_OP_DONE)
		return h->len == 0 ? NIC_DROP_NONE : NIC_DROP_LEN;
	/* a compressed payload's length the SS checks against its scheme; an
	 * empty PUSH or RESULT is a rooted chunk's (WIRE.md), checked there */
	if ((!pbox_hdr_comp(h) && h->len % nic_dtype_size(h->dtype)) ||
	    (exp->max_payload && h->len > exp->max_payload))
		return NIC_DROP_LEN;
	return NIC_DROP_NONE;
}

enum nic_drop nic_wire_parse(const void *frame, size_t len, const struct nic_wire_expect *exp,
			     struct nic_pkt *out)
{
	const uint8_t *f = frame, *ip, *udp;
	size_t rem, ihl, tot, ulen;
	uint16_t et;

	memset(out, 0, sizeof(*out));
	if (len < NIC_ETH_LEN)
		return NIC_DROP_SHORT;
	memcpy(out->src_mac, f + 6, 6);
	et = nic_be16(f + 12);
	out->l3_off = NIC_ETH_LEN;
	/* Nothing is answered, summed or learnt from a source that is not one
	 * host: a reply to it would be a broadcast (a reflection amplifier). */
	if (!nic_mac_unicast(out->src_mac))
		return NIC_DROP_SRC;
	if (et == 0x0806) {
		uint32_t spa;

		if (len < NIC_ETH_LEN + 28)
			return NIC_DROP_SHORT;
		memcpy(&spa, f + NIC_ETH_LEN + 14, 4); /* the ARP sender */
		if (!nic_mac_unicast(f + NIC_ETH_LEN + 8) || !nic_ip_unicast(spa) ||
		    (exp->ip_be && spa == exp->ip_be))
			return NIC_DROP_SRC;
		out->kind = NIC_KIND_ARP;
		return NIC_DROP_NONE;
	}
	if (et != 0x0800)
		return NIC_DROP_ETHERTYPE;

	ip = f + NIC_ETH_LEN;
	rem = len - NIC_ETH_LEN; /* Ethernet padding may follow the datagram */
	if (rem < NIC_IP4_LEN)
		return NIC_DROP_SHORT;
	ihl = (size_t)(ip[0] & 0x0f) * 4;
	tot = nic_be16(ip + 2);
	if ((ip[0] >> 4) != 4 || ihl < NIC_IP4_LEN || ihl > rem || tot < ihl || tot > rem)
		return NIC_DROP_IP_HDR;
	if (nic_csum_fold(ip, ihl, 0) != 0xffff)
		return NIC_DROP_IP_CSUM;
	if (nic_be16(ip + 6) & 0x3fff) /* MF or a fragment offset */
		return NIC_DROP_IP_FRAG;
	memcpy(&out->src_ip_be, ip + 12, 4);
	memcpy(&out->dst_ip_be, ip + 16, 4);
	if (exp->ip_be && out->dst_ip_be != exp->ip_be)
		return NIC_DROP_IP_DST;
	if (!nic_ip_unicast(out->src_ip_be) || out->src_ip_be == out->dst_ip_be)
		return NIC_DROP_SRC;
	out->l4_off = (uint16_t)(NIC_ETH_LEN + ihl);
	if (ip[9] == 1) {
		if (tot < ihl + 8)
			return NIC_DROP_SHORT;
		out->kind = NIC_KIND_ICMP;
		return NIC_DROP_NONE;
	}
	if (ip[9] != 17)
		return NIC_DROP_IP_PROTO;

	udp = ip + ihl;
	if (tot - ihl < NIC_UDP_LEN)
		return NIC_DROP_SHORT;
	ulen = nic_be16(udp + 4);
	if (ulen != tot - ihl)
		return NIC_DROP_UDP_LEN;
	out->src_port = nic_be16(udp);
	out->dst_port = nic_be16(udp + 2);
	if (exp->port_hi && (out->dst_port < exp->port_lo || out->dst_port > exp->port_hi))
		return NIC_DROP_UDP_PORT;
	enum nic_drop d = nic_wire_parse_hdr(udp + NIC_UDP_LEN, ulen - NIC_UDP_LEN, exp, &out->hdr);
	if (d != NIC_DROP_NONE)
		return d;
	out->payload_off = (uint16_t)(out->l4_off + NIC_UDP_LEN + PBOX_HDR_LEN);
	out->kind = NIC_KIND_PBOX;
	return NIC_DROP_NONE;
}

void nic_wire_write_headers(void *buf, const struct nic_addr *src, const struct nic_addr *dst,
			    const struct pbox_hdr *h)
{
	uint8_t *f = buf, *ip = f + NIC_ETH_LEN, *udp = ip + NIC_IP4_LEN;
	uint16_t ulen = (uint16_t)(NIC_UDP_LEN + PBOX_HDR_LEN + h->len);

	memcpy(f, dst->mac, 6);
	memcpy(f + 6, src->mac, 6);
	nic_put16(f + 12, 0x0800);

	ip[0] = 0x45;
	ip[1] = 0;
	nic_put16(ip + 2, (uint16_t)(NIC_IP4_LEN + ulen));
	nic_put16(ip + 4, 0);	   /* id: never fragmented */
	nic_put16(ip + 6, 0x4000); /* DF */
	ip[8] = 64;
	ip[9] = 17;
	nic_put16(ip + 10, 0);
	memcpy(ip + 12, &src->ip_be, 4);
	memcpy(ip + 16, &dst->ip_be, 4);
	nic_put16(ip + 10, (uint16_t)~nic_csum_fold(ip, NIC_IP4_LEN, 0));

	nic_put16(udp, src->port);
	nic_put16(udp + 2, dst->port);
	nic_put16(udp + 4, ulen);
	nic_put16(udp + 6, 0); /* no UDP checksum: IPv4 allows it; NICs offload it */
	nic_wire_put_hdr(udp + NIC_UDP_LEN, h);
}

size_t nic_wire_build(void *buf, size_t cap, const struct nic_addr *src, const struct nic_addr *dst,
		      const struct pbox_hdr *h, const void *payload)
{
	size_t n = NIC_HDRS_LEN + h->len;

	if (cap < n)
		return 0;
	nic_wire_write_headers(buf, src, dst, h);
	memcpy((uint8_t *)buf + NIC_HDRS_LEN, payload, h->len);
	return n;
}
