/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The pbox wire format: Ethernet / IPv4 / UDP / pbox header / payload, the
 * same for the box (DPDK) and the workers (kernel UDP or DPDK). The field
 * table is in nic/WIRE.md. All multi-byte fields are big-endian.
 *
 * nic_wire_parse() validates a whole frame, every field, before anything
 * else looks at it, and says why it refused it (one of NIC_DROP_*). What it
 * cannot know (is the job registered, is the MAC right, is the rank below
 * that job's n, is the chunk in range) the summation service checks next,
 * also before touching state.
 */
#ifndef PBOX_NIC_WIRE_H
#define PBOX_NIC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "nic_nh.h"

#define PBOX_MAGIC	  0x5042u /* "PB" */
#define PBOX_WIRE_VERSION 3u	  /* 3: the payload MAC over NH; 2: the 8-byte MAC */

#define NIC_ETH_LEN  14u
#define NIC_IP4_LEN  20u /* without options; we send none */
#define NIC_UDP_LEN  8u
#define PBOX_HDR_LEN 32u
#define NIC_HDRS_LEN (NIC_ETH_LEN + NIC_IP4_LEN + NIC_UDP_LEN + PBOX_HDR_LEN) /* 74 */

/* IP MTU spent before the payload (60 bytes), and what fragment sizing
 * reserves for it: 4 bytes spare, so a fragment never needs IP options'
 * room to be recomputed. */
#define NIC_L3_OVERHEAD (NIC_IP4_LEN + NIC_UDP_LEN + PBOX_HDR_LEN)
#define NIC_L3_BUDGET	64u
_Static_assert(NIC_L3_OVERHEAD <= NIC_L3_BUDGET, "fragment sizing would not fit the MTU");

/* The MTU -> fragment rule, the same for the box and the workers: the
 * largest power of two that fits @mtu after NIC_L3_BUDGET, at most @chunk;
 * 0 when none does (8192 at MTU 9000, 1024 at 1500). */
static inline uint32_t nic_frag_for_mtu(uint32_t mtu, uint64_t chunk)
{
	uint64_t f = 1;

	if (mtu <= NIC_L3_BUDGET)
		return 0;
	while (f * 2 <= mtu - NIC_L3_BUDGET && f * 2 <= chunk)
		f *= 2;
	return (uint32_t)f;
}

enum pbox_op {
	PBOX_OP_PUSH = 1,   /* worker -> SS: a contribution to a fragment's round */
	PBOX_OP_RESULT = 2, /* SS -> worker: the sum of a round */
	PBOX_OP_ERROR = 3,  /* SS -> worker: refused; payload is one be16 pbox_err */
	PBOX_OP_ACK = 4,    /* SS -> worker: a duplicate push or a probe: your part of this
			     * round is in, the sum waits for other ranks; no payload */
	PBOX_OP_PROBE = 5,  /* worker -> SS: where is this round? (its timer ran out); no
			     * payload. Answered with the result, an ACK or a NACK */
	PBOX_OP_NACK = 6,   /* SS -> worker: answering a probe: your part of this round is
			     * not in: send it again; no payload */
	PBOX_OP_DONE = 7,   /* SS -> worker: answering a probe: this round is complete and
			     * its result went to you before this; no payload */
};
#define PBOX_OP_LAST PBOX_OP_DONE
/* What each side takes (nic_wire_expect.accept_ops): an SS, and a worker. */
#define PBOX_OPS_TO_SS (1u << PBOX_OP_PUSH | 1u << PBOX_OP_PROBE)
#define PBOX_OPS_TO_WORKER                                                                         \
	(1u << PBOX_OP_RESULT | 1u << PBOX_OP_ERROR | 1u << PBOX_OP_ACK | 1u << PBOX_OP_NACK |     \
	 1u << PBOX_OP_DONE)

enum pbox_err {
	PBOX_ERR_NO_JOB = 1,	/* the job is not registered (any more) */
	PBOX_ERR_BAD_TOKEN = 2, /* wire version 1's token check; no longer sent */
	PBOX_ERR_RANGE = 3,	/* rank, chunk or fragment outside the job */
	PBOX_ERR_DTYPE = 4,	/* the push's dtype is not the job's */
	PBOX_ERR_LEN = 5,	/* payload length not the fragment round's */
};

/* What an error code says, for messages ("an unknown error code" past the end). */
const char *nic_err_text(unsigned code);

#define PBOX_F_RETRANS 0x01u /* a retransmission (for counters only) */
#define PBOX_F_PULL    0x02u /* a probe: send me the result (a DONE said it was lost) */
#define PBOX_F_RCOMP                                                                               \
	0x04u /* a push or probe: the result's compressor is bits 4-6, not the                     \
	       * push's own (one direction compressed, WIRE.md) */
#define PBOX_F_REST                                                                                \
	0x08u /* an empty push: a rooted chunk's turn for its fragment and every                   \
	       * later one of its chunk that its tensor has; an empty result: the                  \
	       * round's for every fragment of its chunk (WIRE.md) */
#define PBOX_F_RCOMP_SHIFT 4
#define PBOX_F_RCOMP_MASK  0x70u
#define PBOX_F_KNOWN	   (PBOX_F_RETRANS | PBOX_F_PULL | PBOX_F_RCOMP | PBOX_F_REST | PBOX_F_RCOMP_MASK)

/* Wire dtypes. The summation kernels' enum sum_dtype uses the same numbers
 * (checked where both meet, in ss.c). */
#define PBOX_DTYPE_FP32	 0u
#define PBOX_DTYPE_FP16	 1u
#define PBOX_DTYPE_BF16	 2u
#define PBOX_DTYPE_COUNT 3u

/* The dtype byte carries the wire dtype in its low nibble and, in its high
 * one, the compressor of a compressed payload (appliance/ss/comp.h's enum
 * comp_scheme: 0 none, 1 sign, 2 topk, 3 randk, 4 bf16, 5 fp16), for fp32
 * data only: a push of a compressed fragment, and its result. */
#define PBOX_DTYPE_MASK 0x0fu
#define PBOX_COMP_SHIFT 4
#define PBOX_COMP_COUNT 6u

/* Bytes per element of wire dtype @t (< PBOX_DTYPE_COUNT). */
static inline unsigned nic_dtype_size(unsigned t)
{
	return t == PBOX_DTYPE_FP32 ? 4u : 2u;
}

/* "fp32", "fp16", "bf16"; "?" past the end. nic_dtype_parse: the dtype
 * named @s, or -1. */
const char *nic_dtype_name(unsigned t);
int nic_dtype_parse(const char *s);

/* The pbox header in host byte order. */
struct pbox_hdr {
	uint8_t op, dtype, flags;
	uint16_t rank; /* push: the sender; result: the receiver */
	uint32_t job;
	uint32_t chunk; /* index among the chunks of the receiving endpoint */
	uint16_t frag;	/* fragment index inside the chunk */
	uint16_t len;	/* payload bytes */
	uint32_t round; /* the iteration this contribution belongs to */
	uint64_t mac;	/* nic_mac(): what the job's key says of the rest */
};

/* The dtype and the compressor a header's dtype byte says. */
static inline unsigned pbox_hdr_dtype(const struct pbox_hdr *h)
{
	return h->dtype & PBOX_DTYPE_MASK;
}

static inline unsigned pbox_hdr_comp(const struct pbox_hdr *h)
{
	return h->dtype >> PBOX_COMP_SHIFT;
}

/* The compressor a push asks of its round's result: the push's own, or
 * with PBOX_F_RCOMP the one its flags name (a result says its own in its
 * dtype byte). */
static inline unsigned pbox_hdr_rcomp(const struct pbox_hdr *h)
{
	return h->flags & PBOX_F_RCOMP ? (h->flags & PBOX_F_RCOMP_MASK) >> PBOX_F_RCOMP_SHIFT
				       : pbox_hdr_comp(h);
}

/* Why a frame was refused. X-macro: the enum and the counter names. */
#define NIC_FOREACH_DROP(_)                                                                        \
	_(SHORT, short, "frame shorter than its headers")                                          \
	_(ETHERTYPE, ethertype, "not IPv4, ARP")                                                   \
	_(IP_HDR, ip_hdr, "IPv4 version, header length or total length wrong")                     \
	_(IP_CSUM, ip_csum, "IPv4 header checksum wrong")                                          \
	_(IP_FRAG, ip_frag, "IPv4 fragment")                                                       \
	_(IP_DST, ip_dst, "IPv4 destination is not ours")                                          \
	_(IP_PROTO, ip_proto, "not UDP or ICMP")                                                   \
	_(UDP_LEN, udp_len, "UDP length does not match IPv4 length")                               \
	_(UDP_PORT, udp_port, "UDP destination port not ours")                                     \
	_(MAGIC, magic, "pbox magic wrong")                                                        \
	_(VERSION, version, "pbox version unsupported")                                            \
	_(OP, op, "pbox op unknown or not for us")                                                 \
	_(DTYPE, dtype, "pbox dtype or compressor unknown")                                        \
	_(FLAGS, flags, "pbox flags set that are not defined")                                     \
	_(LEN, len, "pbox payload length wrong")                                                   \
	_(SRC, src, "source not a unicast host (broadcast, multicast, zero or our own)")

enum nic_drop {
	NIC_DROP_NONE = 0,
#define NIC__DROP_ENUM(n, id, s) NIC_DROP_##n,
	NIC_FOREACH_DROP(NIC__DROP_ENUM)
#undef NIC__DROP_ENUM
		NIC_DROP_COUNT
};

/* What the reason means ("IPv4 header checksum wrong"), and its short id
 * ("ip_csum": counter keys and metric labels). */
const char *nic_drop_name(enum nic_drop d);
const char *nic_drop_id(enum nic_drop d);

/* A host's own unicast address, the only kind anything is answered to:
 * not 0.0.0.0, broadcast or class E (240/4), multicast (224/4) or loopback
 * (127/8); a MAC neither group (multicast, broadcast) nor all zero. */
static inline int nic_ip_unicast(uint32_t ip_be)
{
	const uint8_t *b = (const uint8_t *)&ip_be;

	return b[0] != 0 && b[0] != 127 && b[0] < 224;
}

static inline int nic_mac_unicast(const uint8_t mac[6])
{
	return !(mac[0] & 1) && (mac[0] | mac[1] | mac[2] | mac[3] | mac[4] | mac[5]);
}

/* What a valid frame is. */
enum nic_kind {
	NIC_KIND_PBOX = 1, /* a pbox datagram: see nic_pkt.hdr and payload */
	NIC_KIND_ARP,	   /* ARP: for the host-duties code */
	NIC_KIND_ICMP,	   /* ICMP to one of our addresses */
};

/* What the receiver expects; zero fields are not checked. */
struct nic_wire_expect {
	uint32_t ip_be;		   /* our IPv4 address */
	uint16_t port_lo, port_hi; /* our UDP destination ports, inclusive */
	uint16_t max_payload;	   /* the fragment size */
	uint8_t accept_ops;	   /* bit (1 << op) for each op we take */
};

/* A parsed frame. Offsets index into the frame given to the parser. */
struct nic_pkt {
	enum nic_kind kind;
	uint8_t src_mac[6];
	uint32_t src_ip_be, dst_ip_be;
	uint16_t src_port, dst_port; /* host order */
	uint16_t l3_off, l4_off;     /* IPv4 and UDP/ICMP header offsets */
	uint16_t payload_off;	     /* pbox payload */
	struct pbox_hdr hdr;
};

/*
 * Validate @frame (@len bytes, as received, Ethernet header first) and fill
 * @out. Returns NIC_DROP_NONE, or the first reason it is refused. Reads
 * nothing outside [frame, frame + len).
 */
enum nic_drop nic_wire_parse(const void *frame, size_t len, const struct nic_wire_expect *exp,
			     struct nic_pkt *out);

/* Addresses of one end of a datagram. */
struct nic_addr {
	uint8_t mac[6];
	uint32_t ip_be;
	uint16_t port; /* host order */
};

/*
 * Write the Ethernet, IPv4, UDP and pbox headers of a datagram carrying
 * @h->len payload bytes into @buf (NIC_HDRS_LEN bytes). The payload follows
 * the headers, in the same buffer or (DPDK) in a chained segment.
 */
void nic_wire_write_headers(void *buf, const struct nic_addr *src, const struct nic_addr *dst,
			    const struct pbox_hdr *h);

/* Headers and payload into @buf; returns the frame length, or 0 when
 * @cap is too small. */
size_t nic_wire_build(void *buf, size_t cap, const struct nic_addr *src, const struct nic_addr *dst,
		      const struct pbox_hdr *h, const void *payload);

/* The pbox header alone: to and from the 32 bytes after the UDP header
 * (kernel UDP sockets see only those). nic_wire_parse_hdr() checks what
 * does not depend on the lower layers; returns NIC_DROP_NONE or a reason. */
void nic_wire_put_hdr(void *p, const struct pbox_hdr *h);
enum nic_drop nic_wire_parse_hdr(const void *p, size_t udp_payload_len,
				 const struct nic_wire_expect *exp, struct pbox_hdr *h);

/* Big-endian fields at any alignment, for the wire code on both sides. */
static inline uint16_t nic_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t nic_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void nic_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void nic_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/*
 * The MAC in every datagram (bytes 24..31 of the pbox header). A job's
 * 32-byte key (drawn per incarnation: never on the wire in clear) gives a
 * SipHash-2-4 key for the header (libsodium's crypto_shorthash), one for the
 * payload and an NH key (nic_nh.h; ChaCha20's stream under a key derived
 * from the job's). The MAC is SipHash(k_hdr, header bytes 0..23 || digest).
 * PAYLOAD mode (the default): digest = SipHash(k_pay, the payload's NH
 * words), so a forged or altered header or payload is refused, at about a
 * tenth of SipHash's cost over the payload. HEADER mode: digest 0 (an
 * altered payload of a genuine datagram is not refused). OFF: the MAC is 0
 * (for measuring what the MAC costs). nic/WIRE.md says what is covered.
 */
#define NIC_KEY_LEN 32u

enum nic_mac_mode { NIC_MAC_OFF = 0, NIC_MAC_HEADER = 1, NIC_MAC_PAYLOAD = 2, NIC_MAC_MODES };

struct nic_mac {
	uint8_t mode; /* enum nic_mac_mode */
	uint8_t k_hdr[16], k_pay[16];
	nic_nh_fn nh;			 /* the NH variant this CPU runs */
	uint32_t k_nh[NIC_NH_KEY_WORDS]; /* PAYLOAD mode */
};

/* "off", "header", "payload"; "?" past the end. nic_mac_mode_parse: the
 * mode named @s, or -1. */
const char *nic_mac_mode_name(unsigned m);
int nic_mac_mode_parse(const char *s);
/* @m for @mode with the job key @key (NIC_KEY_LEN bytes). */
void nic_mac_init(struct nic_mac *m, unsigned mode, const uint8_t *key);
/* The payload digest: 0 unless PAYLOAD mode. Once per payload, however
 * many headers then carry it (a result fanned out to every rank). */
uint64_t nic_mac_digest(const struct nic_mac *m, const void *payload, size_t len);
/* The MAC of @h (its mac field not read) with @digest; 0 in OFF mode. */
uint64_t nic_mac_hdr(const struct nic_mac *m, const struct pbox_hdr *h, uint64_t digest);

/* A job's key (NIC_KEY_LEN bytes into @key): BLAKE2b of the job's secret
 * (its token), its id and the incarnation's nonce (rank 0 draws one at
 * every start): what every rank derives, and rank 0 hands the box wrapped. */
void nic_job_key(uint64_t secret, uint32_t job, uint64_t nonce, uint8_t *key);

/* The MAC of a datagram: header @h and its h->len payload bytes. */
static inline uint64_t nic_mac_of(const struct nic_mac *m, const struct pbox_hdr *h,
				  const void *payload)
{
	return nic_mac_hdr(m, h, nic_mac_digest(m, payload, h->len));
}

/* Does @h->mac hold for @h and @payload? Constant time in the MAC's bytes. */
static inline int nic_mac_ok(const struct nic_mac *m, const struct pbox_hdr *h, const void *payload)
{
	return (nic_mac_of(m, h, payload) ^ h->mac) == 0;
}

/* The Internet checksum (RFC 1071) of @len bytes, folded, not inverted. */
uint16_t nic_csum_fold(const void *p, size_t len, uint32_t sum);

#endif /* PBOX_NIC_WIRE_H */
